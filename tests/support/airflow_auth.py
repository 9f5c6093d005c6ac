"""Login for the tests of Airflow's API server: the users and passwords of the simple auth manager, the settings
that make Airflow require a login, and the header a token is sent in (moved from tests/plugin/conftest.py and
test_api.py)."""

from __future__ import annotations

import json
from pathlib import Path

USERS = {"admin": "admin-password", "viewer": "viewer-password"}


def auth_environment(home: Path) -> dict[str, str]:
    """Settings that make Airflow require a login (for this process and any server it starts)."""
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps(USERS))
    return {
        "AIRFLOW__CORE__AUTH_MANAGER": "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,viewer:viewer",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "AIRFLOW__API_AUTH__JWT_SECRET": "elastic-training-test-secret-" + "0123456789abcdef" * 3,
    }


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}

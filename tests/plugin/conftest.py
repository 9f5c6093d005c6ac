"""Airflow's API server app with login required (the simple auth manager, users with passwords), and a
client that logs in the way the UI and the CLI do (``POST /auth/token``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.airflow_auth import USERS, auth_environment

# Headless Chromium, for the files that drive a real browser (test_real_run.py, test_browser_journey.py).
from tests.support.browser import browser

__all__ = ["browser"]


@pytest.fixture(scope="module")
def login_required(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    env = auth_environment(tmp_path_factory.mktemp("auth"))
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield env
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def fresh_api_app() -> Any:
    """A new API server app, as a restarted ``airflow api-server`` builds it (plugins mounted)."""
    from airflow.api_fastapi.app import create_app, purge_cached_app

    purge_cached_app()
    return create_app("core")


@pytest.fixture(scope="module")
def api(login_required: dict[str, str], airflow_db: None) -> Iterator[Any]:
    """A test client of the API server app; ``api.token(user)`` logs in."""
    from fastapi.testclient import TestClient

    with TestClient(fresh_api_app()) as client:

        def token(user: str = "viewer") -> str:
            answer = client.post("/auth/token", json={"username": user, "password": USERS[user]})
            assert answer.status_code == 201, answer.text
            return str(answer.json()["access_token"])

        client.token = token  # type: ignore[attr-defined]
        yield client

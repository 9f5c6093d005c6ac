"""Where real MaxText lives on this machine, and how its pinned requirement list is made.

Real MaxText (the ``maxtext`` package, 0.2.5) runs in a venv of its own, ``.venv-maxtext`` at the repository
root, built by ``make maxtext`` on Python 3.12 from ``requirements-maxtext.lock``: MaxText needs Python ≥ 3.12
and its fastapi floor clashes with Airflow's, so it cannot share the project's venv. The environment variable
``ELASTIC_TRAINING_MAXTEXT_PYTHON`` names another interpreter with MaxText installed (an empty value turns
real MaxText off). The tests and the local cluster's image catalogue find it with `maxtext_python`.

``python -m elastic_training.local.maxtext_env WHEEL`` prints ``requirements-maxtext.in`` from a MaxText wheel:
the list the wheel ships for TPU images (``dependencies/requirements/generated_requirements/tpu-requirements.txt``,
maxtext 0.2.5) without ``libtpu`` (no TPU here; JAX runs on CPU), plus the pin of MaxText itself.
"""

from __future__ import annotations

import os
import re
import sys
import zipfile
from pathlib import Path
from typing import Final

PYTHON_ENV: Final = "ELASTIC_TRAINING_MAXTEXT_PYTHON"
VENV_NAME: Final = ".venv-maxtext"
REPOSITORY_ROOT: Final = Path(__file__).resolve().parent.parent
SHIPPED_REQUIREMENTS: Final = "dependencies/requirements/generated_requirements/tpu-requirements.txt"
# Requirements left out of the TPU list: the TPU runtime (a TPU VM's; JAX falls back to CPU without it).
LEFT_OUT: Final = frozenset({"libtpu"})

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_WHEEL = re.compile(r"^maxtext-(?P<version>[^-]+)-")


def default_venv() -> Path:
    """``.venv-maxtext`` at the repository root (what ``make maxtext`` builds)."""
    return REPOSITORY_ROOT / VENV_NAME


def maxtext_python() -> Path | None:
    """The interpreter with real MaxText, or None when there is none (the stand-in runs instead).

    ``ELASTIC_TRAINING_MAXTEXT_PYTHON`` when set (empty: none), else ``.venv-maxtext/bin/python`` once
    ``make maxtext`` finished (its ``.installed`` marker exists).
    """
    named = os.environ.get(PYTHON_ENV)
    if named is not None:
        return Path(named) if named.strip() else None
    venv = default_venv()
    python = venv / "bin" / "python"
    return python if (venv / ".installed").is_file() and python.exists() else None


def requirements_from_wheel(wheel: Path) -> str:
    """``requirements-maxtext.in``: the wheel's shipped TPU list less `LEFT_OUT`, plus ``maxtext==<version>``."""
    match = _WHEEL.match(wheel.name)
    if match is None:
        raise ValueError(f"{wheel}: not a maxtext wheel (maxtext-<version>-….whl)")
    with zipfile.ZipFile(wheel) as archive:
        try:
            shipped = archive.read(SHIPPED_REQUIREMENTS).decode()
        except KeyError:
            raise ValueError(f"{wheel}: has no {SHIPPED_REQUIREMENTS}") from None
    kept = []
    for line in shipped.splitlines():
        name = _NAME.match(line)
        if name and name.group(1).lower() in LEFT_OUT:
            continue
        if name:
            kept.append(line.strip())
    header = (
        f"# MaxText {match['version']}'s {SHIPPED_REQUIREMENTS} less {', '.join(sorted(LEFT_OUT))},\n"
        "# written by `make maxtext-lock` (elastic_training.local.maxtext_env); do not edit.\n"
    )
    return header + f"maxtext=={match['version']}\n" + "\n".join(kept) + "\n"


def main(argv: list[str]) -> int:
    """Print ``requirements-maxtext.in`` for the wheel named in `argv`."""
    if len(argv) != 1:
        print("usage: python -m elastic_training.local.maxtext_env MAXTEXT_WHEEL", file=sys.stderr)
        return 2
    try:
        sys.stdout.write(requirements_from_wheel(Path(argv[0])))
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        print(f"maxtext_env: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

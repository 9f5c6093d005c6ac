"""The wheel, installed as a team with its own Airflow would: built from a clean copy of the repository, installed
WITHOUT extras into a fresh Python 3.12 venv beside the oldest Airflow and cncf-kubernetes provider the package
declares (``apache-airflow==3.3.1``, ``apache-airflow-providers-cncf-kubernetes==10.24.0``), every other core
dependency at its lower bound too (``kubernetes==35.0.0``, ``google-cloud-storage==2.18.0``, …), sharing nothing with
the dev venv (its own interpreter, site-packages, ``AIRFLOW_HOME`` on SQLite, working directory outside the
repository).

One venv per session; uv's cache is the repository's ``.uv-cache`` (``UV_CACHE_DIR``, as ``make`` sets it), so a
re-run downloads nothing. No Python is downloaded: the interpreter is pyenv's 3.12.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parents[2]
PYTHON_312 = Path("/root/.pyenv/versions/3.12.1/bin/python3.12")
AIRFLOW = "apache-airflow==3.3.1"
PROVIDER = "apache-airflow-providers-cncf-kubernetes==10.24.0"
# A team's own package under $AIRFLOW_HOME/plugins with the generic name the wheel once shadowed.
TEAM_PACKAGE = "operators"
DAG_ID = "wheel_elastic_training"
# How this machine reaches the package index (certificates, proxies, a mirror): passed on to uv, nothing else.
NETWORK_ENV = frozenset(
    {
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
        "UV_DEFAULT_INDEX",
        "UV_EXTRA_INDEX_URL",
        "UV_NATIVE_TLS",
        "UV_SYSTEM_CERTS",
        "PIP_FIND_LINKS",
    }
)


def _uv() -> str:
    found = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    if not Path(found).exists():
        pytest.skip("uv is not installed")
    return found


def _run(args: Sequence[str], env: dict[str, str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def _ok(args: Sequence[str], env: dict[str, str], cwd: Path, timeout: float = 600) -> str:
    proc = _run(args, env, cwd, timeout)
    assert proc.returncode == 0, f"{' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@dataclass(frozen=True)
class CoreInstall:
    """The fresh venv with the wheel (no extras), Airflow and the provider, and an Airflow home to run it in."""

    wheel: Path
    venv: Path
    home: Path
    env: dict[str, str]

    def bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)

    def python(self, code: str) -> str:
        return _ok([self.bin("python"), "-c", code], self.env, self.home)

    def airflow(self, *args: str, timeout: float = 600) -> str:
        return _ok([self.bin("airflow"), *args], self.env, self.home, timeout)

    def airflow_json(self, *args: str) -> Any:
        """``airflow ARGS --output json``, past the warnings some commands print on stdout first."""
        lines = self.airflow(*args, "--output", "json").splitlines()
        start = next((i for i, line in enumerate(lines) if line.startswith(("[", "{"))), None)
        if start is None:
            assert lines and lines[-1].strip() == "No data found", lines
            return []
        return json.loads("\n".join(lines[start:]))


def lower_bounds() -> list[str]:
    """``name==X`` for each core dependency declared ``name>=X``: the oldest versions the package says it runs on."""
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = []
    for requirement in dependencies:
        match = re.match(r"^([A-Za-z0-9_.-]+)>=([^,;\s]+)", requirement)
        assert match, f"{requirement}: a core dependency needs a lower bound"
        pins.append(f"{match[1]}=={match[2]}")
    return pins


def test_the_lower_bounds_are_the_ones_the_issue_names() -> None:
    assert {AIRFLOW, PROVIDER} <= set(lower_bounds())


def _clean_copy(dst: Path) -> Path:
    """The files a fresh clone would have (tracked, plus new files not ignored), symlinks kept as symlinks."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    for name in filter(None, listed.decode().split("\0")):
        src, out = ROOT / name, dst / name
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the work tree
        out.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            out.symlink_to(os.readlink(src))
        else:
            shutil.copy2(src, out)
    return dst


@pytest.fixture(scope="session")
def core(tmp_path_factory: pytest.TempPathFactory) -> CoreInstall:
    if not PYTHON_312.exists():
        pytest.skip(f"no Python 3.12 at {PYTHON_312}")
    base = tmp_path_factory.mktemp("wheel")
    uv_env = {
        **{k: v for k, v in os.environ.items() if k.upper() in NETWORK_ENV or k.upper().startswith("UV_INDEX")},
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(base),
        "UV_CACHE_DIR": os.environ.get("UV_CACHE_DIR", str(ROOT / ".uv-cache")),
        "UV_PYTHON_DOWNLOADS": "never",
    }
    source = _clean_copy(base / "source")
    dist = base / "dist"
    _ok(
        [_uv(), "build", "--quiet", "--wheel", "--python", str(PYTHON_312), "--out-dir", str(dist), str(source)],
        uv_env,
        base,
    )
    (wheel,) = dist.glob("elastic_training-*.whl")
    venv = base / "venv"
    _ok([_uv(), "venv", "--quiet", "--python", str(PYTHON_312), str(venv)], uv_env, base)
    _ok(
        [_uv(), "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), str(wheel), *lower_bounds()],
        uv_env,
        base,
    )

    home = base / "airflow"
    (home / "dags").mkdir(parents=True)
    team = home / "plugins" / TEAM_PACKAGE
    team.mkdir(parents=True)
    (team / "team_op.py").write_text('TEAM = "ours"\n')
    (home / "dags" / "elastic_dag.py").write_text(
        "from datetime import datetime\n\n"
        "from airflow.sdk import DAG\n\n"
        "from elastic_training.operators import ElasticJobSetOperator\n\n"
        f'with DAG("{DAG_ID}", start_date=datetime(2026, 1, 1), schedule=None):\n'
        '    ElasticJobSetOperator(task_id="pretrain", run_name="wheel", base_output_directory="/tmp/wheel-run",\n'
        '                          steps=10, checkpoint_period=5, num_slices=1, runtime="local")\n'
    )
    env = {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HOME": str(base),
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
    }
    return CoreInstall(wheel, venv, home, env)


def test_the_wheels_only_top_level_package_is_elastic_training(core: CoreInstall) -> None:
    with zipfile.ZipFile(core.wheel) as wheel:
        names = wheel.namelist()
        (record,) = [n for n in names if n.endswith(".dist-info/RECORD")]
        recorded = [line.split(",")[0] for line in wheel.read(record).decode().splitlines() if line]
        entry_points = wheel.read(record.replace("RECORD", "entry_points.txt")).decode()
    tops = {n.split("/")[0] for n in [*names, *recorded]}
    assert tops == {"elastic_training", record.split("/")[0]}
    assert "elastic_training/operators/triggers.py" in names and "elastic_training/plugin/static/" in " ".join(names)
    assert "[apache_airflow_provider]" in entry_points and "[airflow.plugins]" in entry_points


def test_the_core_install_beside_the_oldest_airflow_and_provider(core: CoreInstall) -> None:
    """Everything a team's Airflow does with the package, without the training libraries."""
    versions = json.loads(
        core.python(
            "import json, importlib.metadata as m, importlib.util as u, sys\n"
            "from elastic_training.operators import (\n"
            "    CheckpointValidationOperator, ElasticJobSetOperator, JobSetOperator)\n"
            "print(json.dumps({'python': sys.version_info[:2], 'airflow': m.version('apache-airflow'),\n"
            "    'provider': m.version('apache-airflow-providers-cncf-kubernetes'),\n"
            "    'absent': [n for n in ('jax', 'jaxlib', 'orbax', 'optax', 'pathwaysutils', 'gcsfs')\n"
            "               if u.find_spec(n)]}))"
        )
    )
    assert versions == {"python": [3, 12], "airflow": "3.3.1", "provider": "10.24.0", "absent": []}
    installed = json.loads(
        core.python(
            "import json, importlib.metadata as m\n"
            f"print(json.dumps({{p: m.version(p.split('==')[0]) for p in {lower_bounds()!r}}}))"
        )
    )
    assert installed == {pin: pin.split("==")[1] for pin in lower_bounds()}

    # Airflow puts $AIRFLOW_HOME/plugins on sys.path when it starts; a team package named `operators` there
    # imports, since the wheel adds no such top-level name.
    team = core.python(f"import airflow, {TEAM_PACKAGE}.team_op as t; print(t.TEAM, t.__file__)")
    assert team.split()[0] == "ours" and team.split()[1].startswith(str(core.home / "plugins"))

    providers = core.airflow_json("providers", "list")
    (ours,) = [p for p in providers if p["package_name"] == "elastic-training"]
    assert ours["version"] == "0.1.0"

    section = core.airflow("config", "list", "--section", "elastic_training", "--include-descriptions")
    assert "[elastic_training]" in section.splitlines()
    for option in ("gke_project", "gke_location", "gke_cluster", "view_kubernetes_conn_id", "defer_settle_seconds"):
        assert f"{option} = " in section
    assert core.airflow("config", "get-value", "elastic_training", "defer_settle_seconds").strip() == "20"

    plugins = core.airflow_json("plugins")
    assert [p["name"] for p in plugins] == ["elastic_training"]

    # The DAG processor parses a DAG with an ElasticJobSetOperator.
    core.airflow("db", "migrate")
    core.airflow("dag-processor", "--num-runs", "1", timeout=900)
    assert core.airflow_json("dags", "list-import-errors") == []
    dags = core.airflow_json("dags", "list")
    assert DAG_ID in [d["dag_id"] for d in dags]


def test_the_core_install_does_not_call_a_checkpoint_with_a_deleted_ocdbt_data_file_valid(
    core: CoreInstall, tmp_path: Path
) -> None:
    """The checkpoint is written by Orbax in the dev venv (the core has none); validated by the core's command."""
    from tests.support.orbax_checkpoints import write_run

    root = write_run(tmp_path / "run", ocdbt=True)
    data = sorted((root / "20" / "items" / "d").iterdir())
    assert data, "orbax wrote no top-level OCDBT data file"
    for path in data:  # the database's B+tree nodes: every file left is present and non-empty
        path.unlink()
    proc = _run([core.bin("elastic-training"), "validate", str(tmp_path / "run")], core.env, core.home, 300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "ocdbt_index_unreadable (items)" in proc.stdout
    assert proc.stdout.rstrip().endswith("step 20: INVALID; latest valid step: 10")


def test_the_hooks_reach_the_cluster_with_the_oldest_clients(core: CoreInstall, cluster_connection: object) -> None:
    """The hooks on cncf-kubernetes 10.24.0, kubernetes 35 and kubernetes_asyncio 32, over HTTP to the local
    cluster (run by the dev venv), through the same ``kubernetes_default`` connection the operators use."""
    code = (
        "import asyncio, json\n"
        "from elastic_training.operators.api_client import TimeoutApiClient\n"
        "from elastic_training.operators.hooks import AsyncJobSetHook, JobSetHook\n"
        "sync = JobSetHook(conn_id='kubernetes_default')\n"
        "out = {'get': sync.get_jobset('absent-abcdef', 'default'),\n"
        "       'list': sync.list_jobsets('default', 'app=absent'), 'pods': sync.list_pods('default', 'app=absent')}\n"
        "async def main():\n"
        "    hook = AsyncJobSetHook(conn_id='kubernetes_default')\n"
        "    try:\n"
        "        async with hook.api() as api:\n"
        "            out['client'] = isinstance(api, TimeoutApiClient)\n"
        "        out['async_get'] = await hook.get_jobset('absent-abcdef', 'default')\n"
        "    finally:\n"
        "        await hook.close()\n"
        "asyncio.run(main())\n"
        "print(json.dumps(out))\n"
    )
    env = {**core.env, "AIRFLOW_CONN_KUBERNETES_DEFAULT": os.environ["AIRFLOW_CONN_KUBERNETES_DEFAULT"]}
    proc = _run([core.bin("python"), "-c", code], env, core.home, 300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == {
        "get": None,
        "list": [],
        "pods": [],
        "client": True,
        "async_get": None,
    }

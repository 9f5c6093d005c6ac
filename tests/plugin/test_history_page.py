"""The plugin's failure-history page and API over HTTP (Airflow's API server app, login required).

The history is written the way the operator writes it: by a task, through the Task SDK's ``Variable`` (a real
``dag.test()`` run of a stand-in that calls ``operators.history_store.record_run``), and read back by the plugin
from the metadata database.
"""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from typing import Any

import pytest

from elastic_training.operators.failure_history import FailureHistory, FailureKind, RunRecord, SliceFailure
from elastic_training.operators.history_store import history_key, run_key
from elastic_training.plugin.history_view import chart_svg
from tests.support.airflow_auth import auth
from tests.support.airflow_dags import dag_from_source, states

DAG_ID = "fake_history"
HEADER = """\
from airflow.sdk import DAG, BaseOperator

from elastic_training.operators.failure_history import FailureKind, RunRecord, SliceFailure
from elastic_training.operators.history_store import history_key, record_run, record_run_id


def lost(pool, at, host):
    return SliceFailure(at=at, kind=FailureKind.LOST_HOST, pool=pool, hosts=(host,), slice=0, jobset="js")


class ElasticJobSetOperator(BaseOperator):
    # Records three nights of history as the real operator records one run at its end (under its key as the real
    # operator names it: a custom failure_history_key, else the task's, .m<index> for a mapped instance), and
    # returns a report naming that key, as the real one does.
    def __init__(self, failure_history_key=None, night=None, **kwargs):
        super().__init__(**kwargs)
        self.failure_history_key, self.night = failure_history_key, night

    def execute(self, context):
        ti = context["ti"]
        key = self.failure_history_key or history_key(ti.dag_id, ti.task_id, ti.map_index)
        if self.night is not None:
            shared = self.failure_history_key is not None
            run_id = record_run_id(self.night, dag_id=ti.dag_id, task_id=ti.task_id, map_index=ti.map_index,
                                   shared=shared)
            record_run(key, RunRecord(run_id=run_id, ended_at=1796000000.0, pools=("tpu-a",)), self.log.warning)
            return {"target_step": 9, "history_key": key}
        pools = ("tpu-a", "tpu-b", "tpu-c")
        nights = [
            RunRecord(run_id="night-1", ended_at=1796000000.0, failures=(lost("tpu-b", 1796000000.0, "gke-b-0"),),
                      pools=pools, slices=3, checkpoint_period=10, goodput=0.9),
            RunRecord(run_id="night-2", ended_at=1796086400.0, pools=pools, slices=3,
                      failures=(lost("tpu-b", 1796086000.0, "gke-b-2"),
                                SliceFailure(at=1796086100.0, kind=FailureKind.EVICTION, pool="tpu-a", slice=1)),
                      checkpoint_period=10, goodput=0.8),
            RunRecord(run_id="night-3", ended_at=1796172800.0, pools=("tpu-a", "tpu-c", "tpu-d"), slices=3,
                      avoided_pools=("tpu-b",), checkpoint_period=7, goodput=0.95,
                      failures=(lost("tpu-x", 1796172000.0, "<script>x</script>"),)),
        ]
        for night in nights:
            record_run(key, night, self.log.warning)
        return {"target_step": 9, "history_key": key}
"""
CUSTOM = "shared_history.drill"


@pytest.fixture(scope="module")
def history(api: Any) -> None:
    body = f"""
    with DAG({DAG_ID!r}, schedule=None) as dag:
        ElasticJobSetOperator(task_id="pretrain")
        ElasticJobSetOperator.partial(task_id="sweep").expand(night=["night-m0", "night-m1"])
        ElasticJobSetOperator(task_id="drill", failure_history_key={CUSTOM!r}, night="drill-1")
    """
    dag_run = dag_from_source(DAG_ID, body, HEADER).test()
    assert states(dag_run) == {"pretrain": "success", "sweep": "success", "drill": "success"}


def test_the_history_api_tallies_failures_per_pool(api: Any, history: None) -> None:
    answer = api.get(f"/elastic-training/api/history/{DAG_ID}/pretrain?runs=3", headers=auth(api.token()))
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert [r["run_id"] for r in body["runs"]] == ["night-1", "night-2", "night-3"] and body["kept_runs"] == 3
    pools = {p["pool"]: p for p in body["pools"]}
    assert pools["tpu-b"]["health_failures"] == 2 and pools["tpu-b"]["by_run"] == {"night-1": 1, "night-2": 1}
    assert pools["tpu-a"]["health_failures"] == 0 and pools["tpu-a"]["by_kind"] == {"eviction": 1}
    assert pools["tpu-d"]["runs_used"] == 1
    FailureHistory.from_json({"version": 1, "runs": body["runs"]})  # the runs as the history keeps them
    last = api.get(f"/elastic-training/api/history/{DAG_ID}/pretrain?runs=1", headers=auth(api.token())).json()
    assert [r["run_id"] for r in last["runs"]] == ["night-3"]


def test_the_history_page_draws_failures_per_pool_and_links_them(api: Any, history: None) -> None:
    page = api.get(
        f"/elastic-training/ui/history?dag_id={DAG_ID}&task_id=pretrain&runs=3", cookies={"_token": api.token()}
    )
    assert page.status_code == 200, page.text
    html = page.text
    assert '<svg id="pool-chart"' in html
    assert 'data-pool="tpu-b" data-kind="lost_host" data-count="2"' in html
    assert 'data-pool="tpu-a" data-kind="eviction" data-count="1"' in html
    # Each run's failures link to their pool's section; each run links to its run view.
    assert '<a class="failure lost_host" href="#pool-tpu-b">tpu-b</a>' in html and 'id="pool-tpu-b"' in html
    assert "/elastic-training/ui/run?dag_id=fake_history&amp;run_id=night-2" in html
    assert "gke-b-2" in html and "night-3" in html
    # What came from the Variable is escaped, never markup.
    assert "<script>x</script>" not in html and "&lt;script&gt;x&lt;/script&gt;" in html


def test_the_chart_legend_names_every_kind_within_the_chart() -> None:
    # One failure of each kind on one pool: each bar's kind has its swatch and name in the legend, and every name
    # ends inside the drawing (at 640 px the fifth, "deleted", once began past its right edge and was cut off).
    failures = tuple(SliceFailure(at=1.0, kind=kind, pool="tpu-a", slice=0) for kind in FailureKind)
    svg = ElementTree.fromstring(chart_svg([RunRecord(run_id="r", ended_at=2.0, failures=failures, pools=("tpu-a",))]))
    width = float(svg.attrib["width"])
    ns = "{http://www.w3.org/2000/svg}"
    legend = [t for t in svg.iter(f"{ns}text") if t.text in {k.value for k in FailureKind}]
    assert sorted(t.text or "" for t in legend) == sorted(k.value for k in FailureKind)
    for text in legend:  # 13 px sans-serif: at most about 8 px a character
        assert float(text.attrib["x"]) + 8 * len(text.text or "") <= width, (text.text, text.attrib["x"], width)
    bars = {rect.attrib["data-kind"] for rect in svg.iter(f"{ns}rect") if "data-kind" in rect.attrib}
    assert bars == {k.value for k in FailureKind}


def test_a_task_without_history_says_so(api: Any, history: None) -> None:
    page = api.get(f"/elastic-training/ui/history?dag_id={DAG_ID}&task_id=evaluate", cookies={"_token": api.token()})
    assert page.status_code == 200 and 'id="no-history"' in page.text
    answer = api.get(f"/elastic-training/api/history/{DAG_ID}/evaluate", headers=auth(api.token()))
    assert answer.json()["runs"] == [] and answer.json()["pools"] == []


def test_the_history_is_not_served_anonymously_and_checks_its_input(api: Any, history: None) -> None:
    api.cookies.clear()
    assert api.get(f"/elastic-training/api/history/{DAG_ID}/pretrain").status_code == 401
    page = api.get(f"/elastic-training/ui/history?dag_id={DAG_ID}&task_id=pretrain", follow_redirects=False)
    assert page.status_code == 303 and page.headers["location"].startswith("/auth/login?next=")
    token = api.token()
    assert api.get(f"/elastic-training/api/history/{DAG_ID}/bad%20task", headers=auth(token)).status_code == 400
    assert api.get(f"/elastic-training/api/history/{DAG_ID}/pretrain?runs=0", headers=auth(token)).status_code == 422
    bad = api.get("/elastic-training/ui/history?dag_id=%3Cscript%3E&task_id=pretrain", cookies={"_token": token})
    assert bad.status_code == 400


def test_a_mapped_instance_and_a_custom_key_each_have_their_history(api: Any, history: None) -> None:
    token = api.token()
    sweep = api.get(f"/elastic-training/api/history/{DAG_ID}/sweep", headers=auth(token)).json()
    base = history_key(DAG_ID, "sweep")
    assert sweep["key"] == base and sweep["runs"] == []  # the unmapped key holds none of the instances' runs
    assert set(sweep["keys"]) == {base, f"{base}.m0", f"{base}.m1"}
    for index in (0, 1):
        one = api.get(f"/elastic-training/api/history/{DAG_ID}/sweep?key={base}.m{index}", headers=auth(token))
        assert [r["run_id"] for r in one.json()["runs"]] == [f"night-m{index}"], one.text
    drill = api.get(f"/elastic-training/api/history/{DAG_ID}/drill", headers=auth(token)).json()
    assert CUSTOM in drill["keys"]  # named by the task's run report
    custom = api.get(f"/elastic-training/api/history/{DAG_ID}/drill?key={CUSTOM}", headers=auth(token)).json()
    assert [r["run_id"] for r in custom["runs"]] == [f"{DAG_ID}/drill/drill-1"]  # a shared key: the writer named
    shared = api.get(
        f"/elastic-training/ui/history?dag_id={DAG_ID}&task_id=drill&key={CUSTOM}", cookies={"_token": token}
    )
    assert f'href="/elastic-training/ui/run?dag_id={DAG_ID}&amp;run_id=drill-1"' in shared.text  # its own run's view
    page = api.get(
        f"/elastic-training/ui/history?dag_id={DAG_ID}&task_id=sweep&key={base}.m1", cookies={"_token": token}
    )
    assert page.status_code == 200 and "night-m1" in page.text and "night-m0" not in page.text
    assert f'href="/elastic-training/ui/history?dag_id={DAG_ID}&amp;task_id=sweep&amp;key={base}.m0"' in page.text
    # A key is served only as one of the task's histories: not another task's, not any Variable.
    other = api.get(f"/elastic-training/api/history/{DAG_ID}/drill?key={base}.m0", headers=auth(token))
    assert other.status_code == 404
    ui = api.get(f"/elastic-training/ui/history?dag_id={DAG_ID}&task_id=drill&key=secret", cookies={"_token": token})
    assert ui.status_code == 404


def test_a_record_edited_into_garbage_is_named_on_the_page_the_rest_shown(api: Any, history: None) -> None:
    from airflow.models import Variable

    bad = run_key(history_key(DAG_ID, "pretrain"), "edited")
    Variable.set(bad, '{"version": 1, "run": {"run_id": "edited", "ended_at": "<b>yesterday</b>"}}')
    try:
        token = api.get(f"/elastic-training/api/history/{DAG_ID}/pretrain", headers=auth(api.token())).json()
        assert token["kept_runs"] == 3 and len(token["notes"]) == 1 and bad in token["notes"][0]
        page = api.get(
            f"/elastic-training/ui/history?dag_id={DAG_ID}&task_id=pretrain", cookies={"_token": api.token()}
        )
        assert 'id="history-notes"' in page.text and bad in page.text and "night-3" in page.text
        assert "<b>yesterday</b>" not in page.text
    finally:
        Variable.delete(bad)

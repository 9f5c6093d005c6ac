"""`CheckpointValidationOperator` run for real inside small DAGs with ``dag.test()``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from elastic_training.operators.checkpoint_operator import _optional_int, checkpoint_asset_uri
from tests.support.airflow_dags import dag_from_source, states, xcom
from tests.support.alert_notifier import told
from tests.support.statsd_listener import StatsdListener, airflow_stats_from_environment


def _asset_events(uri: str) -> list[dict[str, Any]]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (
            session.query(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.uri == uri)
            .all()
        )
        return [dict(r.extra) for r in rows]


def test_helpers() -> None:
    assert checkpoint_asset_uri("gs://b/run/checkpoints/") == "gs://b/run/checkpoints"
    assert checkpoint_asset_uri("/x/y") == "file:///x/y"
    assert _optional_int("step", " None ") is None and _optional_int("step", "12") == 12
    from airflow.sdk.exceptions import AirflowFailException

    for bad in ("twelve", "-1", True):
        with pytest.raises(AirflowFailException):
            _optional_int("expected_min_step", bad)


def _dag_from_source(dag_id: str, body: str) -> Any:
    header = (
        "from airflow.sdk import DAG, task\nfrom operators import CheckpointValidationOperator\n"
        "from tests.support.alert_notifier import FileNotifier"
    )
    return dag_from_source(dag_id, body, header)


@pytest.mark.slow
def test_valid_checkpoint_pushes_verdict_and_asset_event(airflow_db: None, orbax_runs: dict[str, Path]) -> None:
    run = orbax_runs["zarr"]
    dag = _dag_from_source(
        "ckpt_ok",
        f"""
        with DAG("ckpt_ok", schedule=None) as dag:

            @task
            def pretrain() -> int:
                return 20  # the final step the training stage reports

            validate = CheckpointValidationOperator(
                task_id="validate",
                path={str(run)!r},
                expected_min_step="{{{{ ti.xcom_pull(task_ids='pretrain') }}}}",
            )
            pretrain() >> validate
        """,
    )
    dag_run = dag.test()
    assert states(dag_run) == {"pretrain": "success", "validate": "success"}
    verdict = xcom(dag_run, "validate")
    assert verdict["step"] == 20 and verdict["valid"] and not verdict["fallback"]
    assert verdict["path"] == str(run / "checkpoints" / "20") and verdict["layout"] == "zarr2"
    report = xcom(dag_run, "validate", "report")
    assert report["latest_valid_step"] == 20 and len(report["steps"]) == 3
    (extra,) = _asset_events(f"file://{run}")  # the path as given; extra says where the root is
    assert extra["root"] == str(run / "checkpoints")
    assert {k: extra[k] for k in ("step", "path", "files", "bytes")} == {
        "step": 20,
        "path": str(run / "checkpoints" / "20"),
        "files": verdict["files"],
        "bytes": verdict["bytes"],
    }
    assert extra["validated_at"].startswith("20")


@pytest.mark.slow
def test_invalid_newest_step_fails_or_falls_back(airflow_db: None, run_copy: Callable[[str], Path]) -> None:
    run = run_copy("ocdbt")
    (run / "checkpoints" / "20" / "items" / "manifest.ocdbt").unlink()
    inbox = run.parent / "inbox.jsonl"
    dag = _dag_from_source(
        "ckpt_bad",
        f"""
        with DAG("ckpt_bad", schedule=None, params={{"run": {str(run)!r}}}) as dag:
            CheckpointValidationOperator(task_id="strict", path={str(run)!r}, alerts=FileNotifier(path={str(inbox)!r}))
            CheckpointValidationOperator(
                task_id="fallback", path="{{{{ params.run }}}}", fallback_to_latest_valid=True, asset_alias="ckpt",
                alerts=[FileNotifier(path={str(inbox)!r})],
            )
            CheckpointValidationOperator(
                task_id="behind", path={str(run)!r}, expected_min_step=21, fallback_to_latest_valid=True
            )
        """,
    )
    statsd = StatsdListener()
    try:
        with airflow_stats_from_environment(statsd.environment()):
            dag_run = dag.test()
        assert states(dag_run) == {"strict": "failed", "fallback": "success", "behind": "failed"}
        # Each verdict counted under its outcome, tagged with its task (docs/operations.md, "Metrics").
        statsd.wait_for(lambda got: len([d for d in got if "checkpoint_validation" in d.name]) >= 3)
    finally:
        statsd.close()
    counted = sorted(
        (d.tags["task_id"], d.name, d.value) for d in statsd.named("elastic_training.checkpoint_validation.")
    )
    assert counted == [
        ("behind", "elastic_training.checkpoint_validation.invalid", 1),
        ("fallback", "elastic_training.checkpoint_validation.fallback", 1),
        ("strict", "elastic_training.checkpoint_validation.invalid", 1),
    ]
    strict_report = xcom(dag_run, "strict", "report")
    assert strict_report["steps"][0]["problems"][0]["code"] == "ocdbt_manifest_missing"
    verdict = xcom(dag_run, "fallback")
    assert (verdict["step"], verdict["fallback"], verdict["requested_step"]) == (10, True, 20)
    # The alias resolved to the rendered path: one event, for step 10.
    assert [e["step"] for e in _asset_events(f"file://{run}")] == [10]
    # Both judged step 20 invalid and told their notifier so (the fallback too: it succeeded on an older step).
    alerts = {r["alert"]["task_id"]: r["alert"] for r in told(inbox)}
    assert set(alerts) == {"strict", "fallback"}
    for alert in alerts.values():
        assert alert["event"] == "checkpoint_invalid" and alert["details"]["step"] == 20
        assert alert["details"]["path"] == str(run / "checkpoints" / "20") and alert["details"]["moved_to"] is None
        assert any(p.startswith("ocdbt_manifest_missing") for p in alert["details"]["problems"])


def test_failure_message_lists_the_problems(run_copy: Callable[[str], Path]) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    from elastic_training.operators import CheckpointValidationOperator
    from elastic_training.operators.checkpoints import validate_checkpoints

    run = run_copy("zarr")
    (run / "checkpoints" / "20" / "commit_success.txt").unlink()
    (run / "checkpoints" / "20" / "items" / "opt.mu" / "0.0").unlink()
    op = CheckpointValidationOperator(task_id="v", path=str(run))
    with pytest.raises(AirflowFailException) as err:
        op._choose(validate_checkpoints(str(run)))
    message = str(err.value)
    assert "step 20" in message and "newest valid step is 10" in message
    assert "commit_marker_missing" in message and "chunk_missing (items/opt.mu/0.0)" in message


class _TI:
    def __init__(self) -> None:
        self.pushed: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


class _AliasEvents:
    def __init__(self) -> None:
        self.added: list[tuple[Any, dict[str, Any]]] = []

    def add(self, asset: Any, extra: dict[str, Any]) -> None:
        self.added.append((asset, extra))


class _OutletEvents(dict[Any, Any]):
    def __missing__(self, key: Any) -> Any:
        from types import SimpleNamespace

        from airflow.sdk import AssetAlias

        self[key] = _AliasEvents() if isinstance(key, AssetAlias) else SimpleNamespace(extra={})
        return self[key]


def _render_and_execute(op: Any, **params: Any) -> tuple[dict[str, Any], dict[str, Any], _OutletEvents]:
    """What the task runner does, minus the database: render the templated fields, then execute."""
    ti, events = _TI(), _OutletEvents()
    context: Any = {"params": params, "ti": ti, "outlet_events": events}
    op.render_template_fields(context)
    return op.execute(context), ti.pushed, events


def _templated_operator() -> Any:
    from elastic_training.operators import CheckpointValidationOperator

    return CheckpointValidationOperator(
        task_id="v",
        path="{{ params.run }}",
        step="{{ params.step }}",
        expected_min_step="{{ params.expected }}",
        reference_step="{{ params.ref }}",
    )


def test_templated_fields() -> None:
    from elastic_training.operators import CheckpointValidationOperator

    fields = set(CheckpointValidationOperator.template_fields)
    assert {"path", "step", "expected_min_step", "reference_step"} <= fields


def test_templated_step_and_reference_step(run_copy: Callable[[str], Path]) -> None:
    run = run_copy("zarr")
    (run / "checkpoints" / "20" / "items" / "opt.mu" / "0.0").unlink()
    op = _templated_operator()
    verdict, pushed, events = _render_and_execute(op, run=str(run), step=10, expected=10, ref=0)
    assert (verdict["step"], verdict["requested_step"], verdict["fallback"]) == (10, 10, False)
    assert verdict["latest_valid_step"] == 10 and pushed["report"]["step"] == 10
    ((asset, extra),) = events[op.asset_alias].added
    assert asset.uri == f"file://{run}" and extra["step"] == 10 and extra["path"] == str(run / "checkpoints" / "10")
    assert set(extra) == {"step", "path", "root", "bytes", "files", "validated_at"}


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"run": ""}, "non-empty"),
        ({"run": "None"}, "absolute or a gs:// URI"),  # an upstream XCom that returned nothing
        ({"run": "relative/run"}, "absolute or a gs:// URI"),
        ({"run": "{root}/../../etc"}, "'..'"),
        ({"run": "gs://bucket/runs/../other"}, "'..'"),
        ({"run": "gs:///runs"}, "without a bucket"),
        ({"run": "{root}\n"}, "control characters"),
        ({"run": "{root}", "step": -1}, "step must be >= 0"),
        ({"run": "{root}", "step": "latest"}, "step must be a step number"),
        ({"run": "{root}", "expected": "-5"}, "expected_min_step must be >= 0"),
        ({"run": "{root}", "ref": "1.5"}, "reference_step must be a step number"),
    ],
)
def test_hostile_templated_values_fail_clearly(
    orbax_runs: dict[str, Path], params: dict[str, Any], message: str
) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    op = _templated_operator()
    values = {"step": None, "expected": None, "ref": None, **params}
    values["run"] = str(values["run"]).replace("{root}", str(orbax_runs["ocdbt"]))
    with pytest.raises(AirflowFailException, match=message) as err:
        _render_and_execute(op, **values)
    assert "Traceback" not in str(err.value)


def test_bad_literal_path_is_a_dag_error() -> None:
    from elastic_training.operators import CheckpointValidationOperator

    for bad in ("", "runs/pretrain", "/data/../etc", "gs://"):
        with pytest.raises(ValueError, match="path"):
            CheckpointValidationOperator(task_id="v", path=bad)
    op = CheckpointValidationOperator(task_id="v", path=Path("/data/run"))
    assert op.path == "/data/run" and op.asset is not None and op.asset.uri == "file:///data/run"

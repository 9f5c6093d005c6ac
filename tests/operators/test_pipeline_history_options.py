"""The nightly form's history options: ``avoid_failing_node_pools`` and ``auto_checkpoint_period`` (off by default),
refused when not booleans, carried in the configuration to the pretrain stage's operator."""

from __future__ import annotations

from pathlib import Path

import pytest

from elastic_training.operators.advice import AUTO_PERIOD
from elastic_training.operators.pipeline import PretrainOperator
from elastic_training.operators.pipeline_params import ParamError, param_definitions
from tests.support.pipeline_params import check


def test_both_are_off_by_default_and_in_the_form(tmp_path: Path) -> None:
    config = check(tmp_path)
    assert config.avoid_failing_node_pools is False and config.auto_checkpoint_period is False
    form = {d.name: d for d in param_definitions(data_directory=str(tmp_path))}
    assert form["avoid_failing_node_pools"].schema["type"] == "boolean"
    assert form["auto_checkpoint_period"].schema["type"] == "boolean"


@pytest.mark.parametrize("name", ["avoid_failing_node_pools", "auto_checkpoint_period"])
def test_anything_but_a_boolean_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ParamError, match=name):
        check(tmp_path, **{name: "yes"})


def test_the_pretrain_stage_gets_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = check(tmp_path, avoid_failing_node_pools=True, auto_checkpoint_period=True)
    operator = PretrainOperator(task_id="pretrain")
    monkeypatch.setattr("elastic_training.operators.pipeline.pipeline_config", lambda context: config)
    monkeypatch.setattr(
        "elastic_training.operators.elastic_operator.ElasticJobSetOperator.render_template_fields",
        lambda self, context, jinja_env=None: None,
    )
    operator.render_template_fields({})  # type: ignore[arg-type]
    assert operator.training.checkpoint_period == AUTO_PERIOD and operator.auto_period
    assert operator.auto_fallback_period == config.checkpoint_period
    assert operator.history.avoid_failing_node_pools is True

"""``operators.shape_prior``: the step and save times ``auto`` assumes before any run of a shape, from its spec."""

from __future__ import annotations

import math

import pytest

from elastic_training.operators.shape_prior import estimate_shape
from elastic_training.operators.spec import ElasticRunSpec


def spec(**args: str) -> ElasticRunSpec:
    return ElasticRunSpec(
        run_name="r", base_output_directory="gs://b", steps=5000, checkpoint_period=100, num_slices=4,
        tpu_type="v5e", tpu_topology="4x4", image="maxtext:1", maxtext_args=args,
    )  # fmt: skip


def test_qwen3_on_v5e_16_is_estimated_from_its_parameters_chips_and_hosts() -> None:
    estimate = estimate_shape(spec(model_name="qwen3-0.6b"), "v5e")
    assert estimate is not None
    # 6 * 0.6e9 parameters * (12 x 2048 tokens, MaxText's defaults) at 40 % of 197 TFLOP/s
    assert math.isclose(estimate.step_seconds, 6 * 0.6e9 * 24576 / (197e12 * 0.4))
    # 12 bytes a parameter (float32 weights, Adam's two moments) over 4 hosts at 0.45 GB/s
    assert math.isclose(estimate.save_seconds, 7.2e9 / 4 / 0.45e9)
    assert estimate.recovery_seconds == 110.0
    assert "qwen3-0.6b" in estimate.source and "4 host(s)" in estimate.source


def test_a_larger_batch_a_slower_chip_and_a_bigger_model_each_cost_what_they_should() -> None:
    base = estimate_shape(spec(model_name="llama2-7b"), "v5e")
    doubled = estimate_shape(spec(model_name="llama2-7b", per_device_batch_size="24"), "v5e")
    faster = estimate_shape(spec(model_name="llama2-7b"), "v6e")
    assert base is not None and doubled is not None and faster is not None
    assert math.isclose(doubled.step_seconds, 2 * base.step_seconds) and doubled.save_seconds == base.save_seconds
    assert faster.step_seconds < base.step_seconds / 4


@pytest.mark.parametrize(
    ("args", "generation"),
    [({"model_name": "my-own-model"}, "v5e"), ({}, "v9z"), ({"per_device_batch_size": "lots"}, "v5e")],
)
def test_an_unknown_model_chip_or_batch_gives_no_estimate(args: dict[str, str], generation: str) -> None:
    assert estimate_shape(spec(**args), generation) is None

"""What ``checkpoint_period="auto"`` knows of a shape before any run of it: its step and save times, estimated from
the spec's model and accelerator, and the recovery measured on a TPU v5e. Pure (no I/O, no Airflow).

The estimates follow MaxText's defaults (``MaxText/configs/base.yml``): ``per_device_batch_size`` 12,
``max_target_length`` 2048, weights in float32 and Adam's two moments beside them, so a train state of 12 bytes a
parameter, which Orbax writes once (each shard from one replica), spread over one slice's hosts:

- a step: ``6 * parameters * tokens per chip`` FLOPs (forward and backward, attention left out) at
  :data:`ASSUMED_MFU` of the chip's peak bf16 rate (Cloud TPU's published figures, :data:`PEAK_FLOPS`);
- a save: the state's bytes on one host over :data:`WRITE_BYTES_PER_SECOND` (benchmarks/RESULTS.md, "TPU v5e":
  6.1 GB committed in 13.7 s from one v5e host; gs:// is assumed no faster);
- a recovery: :data:`RECOVERY_SECONDS`, the demo's kill-to-next-step on the TPU v5e measurement.

A model MaxText names that :data:`MODEL_PARAMETERS` does not list gives no estimate (``None``): ``auto`` then runs
its fallback until a run of the shape is measured. The estimates are a start, not a measurement: the period they
give is the first night's only, and the night's own measurements replace them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Protocol

# Total parameters (embeddings included) as the models' cards state them, by MaxText's model_name.
MODEL_PARAMETERS: Final[Mapping[str, float]] = {
    "default": 1.1e9,  # base.yml: 16 layers of 2048, MLP 7168, vocabulary 32,000, embeddings untied
    "gemma-2b": 2.5e9,
    "gemma-7b": 8.5e9,
    "gemma2-2b": 2.6e9,
    "gemma2-9b": 9.2e9,
    "gemma2-27b": 27.2e9,
    "llama2-7b": 6.7e9,
    "llama2-13b": 13.0e9,
    "llama2-70b": 69.0e9,
    "llama3-8b": 8.0e9,
    "llama3-70b": 70.6e9,
    "llama3.1-8b": 8.0e9,
    "llama3.1-70b": 70.6e9,
    "mistral-7b": 7.2e9,
    "mixtral-8x7b": 46.7e9,
    "qwen3-0.6b": 0.6e9,
    "qwen3-1.7b": 1.7e9,
    "qwen3-4b": 4.0e9,
    "qwen3-8b": 8.2e9,
    "qwen3-14b": 14.8e9,
    "qwen3-32b": 32.8e9,
}
PEAK_FLOPS: Final[Mapping[str, float]] = {"v4": 275e12, "v5e": 197e12, "v5p": 459e12, "v6e": 918e12}  # bf16, a chip
ASSUMED_MFU: Final = 0.4
STATE_BYTES_PER_PARAMETER: Final = 12  # float32 weights and Adam's two moments
WRITE_BYTES_PER_SECOND: Final = 0.45e9  # a host's committed save rate, TPU v5e (6.1 GB in 13.7 s)
RECOVERY_SECONDS: Final = 110.0
MAXTEXT_DEFAULTS: Final[Mapping[str, str]] = {
    "model_name": "default",
    "per_device_batch_size": "12",
    "max_target_length": "2048",
}


@dataclass(frozen=True)
class ShapeEstimate:
    """A shape's step, save and recovery seconds before any run of it, and one line on where they came from."""

    step_seconds: float
    save_seconds: float
    recovery_seconds: float
    source: str


class EstimatedShape(Protocol):
    """What of a spec the estimate reads (an ``ElasticRunSpec`` has it)."""

    @property
    def maxtext_args(self) -> Mapping[str, str]: ...
    @property
    def vms_per_slice(self) -> int: ...


def estimate_shape(shape: EstimatedShape, generation: str) -> ShapeEstimate | None:
    """The estimate for ``shape`` on TPU ``generation`` (``"v5e"``...), or ``None`` for a model or chip not listed
    or MaxText arguments that are not numbers."""
    args = {**MAXTEXT_DEFAULTS, **shape.maxtext_args}
    parameters, peak = MODEL_PARAMETERS.get(args["model_name"]), PEAK_FLOPS.get(generation)
    try:
        tokens = float(args["per_device_batch_size"]) * float(args["max_target_length"])
    except ValueError:
        return None
    if parameters is None or peak is None or not 0 < tokens < 1e9:
        return None
    hosts = max(1, shape.vms_per_slice)
    step = 6 * parameters * tokens / (peak * ASSUMED_MFU)
    save = STATE_BYTES_PER_PARAMETER * parameters / hosts / WRITE_BYTES_PER_SECOND
    source = (
        f"estimated from the spec: {args['model_name']} ({parameters / 1e9:.3g} B parameters), {tokens:.0f} tokens a "
        f"chip a step on {generation} at {ASSUMED_MFU:.0%} of its peak: a step {step:.3g} s; a "
        f"{STATE_BYTES_PER_PARAMETER * parameters / 1e9:.3g} GB state over {hosts} host(s) at "
        f"{WRITE_BYTES_PER_SECOND / 1e9:g} GB/s: a save {save:.3g} s"
    )
    return ShapeEstimate(step_seconds=step, save_seconds=save, recovery_seconds=RECOVERY_SECONDS, source=source)

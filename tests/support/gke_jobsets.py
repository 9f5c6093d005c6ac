"""The operator's GKE JobSet of 3 slices of v5e 4x4 (4 hosts each), as tests and benchmarks render it for the
default ``v5e-small`` cluster; and the same JobSet with its containers asleep, for what only needs placement."""

from __future__ import annotations

from typing import Any

from elastic_training.operators.spec import ElasticRunSpec


def v5e_16_spec(name: str, **options: Any) -> ElasticRunSpec:
    """A run of 3 slices of v5e 4x4 on GKE: 100 steps, a checkpoint every 10, a MaxText image; ``options`` added."""
    return ElasticRunSpec(
        run_name=name,
        base_output_directory="gs://bucket/runs",
        steps=100,
        checkpoint_period=10,
        num_slices=3,
        image="us-docker.pkg.dev/p/maxtext:1",
        tpu_type="v5e",
        tpu_topology="4x4",
        **options,
    )


def asleep(jobset: dict[str, Any], seconds: int) -> dict[str, Any]:
    """``jobset`` with each container that has a command (the trainer) a ``sleep`` of ``seconds`` instead: something
    that stays up. The catalogue's MaxText image runs MaxText's entry points only, so ``sleep`` needs ``local``."""
    for rjob in jobset["spec"]["replicatedJobs"]:
        for container in rjob["template"]["spec"]["template"]["spec"]["containers"]:
            if container.get("command"):
                container["image"], container["args"], container["command"] = "local", [], ["sleep", str(seconds)]
    return jobset

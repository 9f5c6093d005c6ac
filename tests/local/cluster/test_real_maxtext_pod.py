"""The local cluster runs real MaxText for a non-elastic training pod (the MaxText image's entry point, over HTTP).

The pod is what a JobSet's trainer container is on GKE: the MaxText image with ``python3 -m
maxtext.trainers.pre_train.train src/maxtext/configs/base.yml key=value …``. With ``.venv-maxtext`` present
(tests/support/real_maxtext.py builds it when missing) the catalogue runs MaxText 0.2.5 itself
(local/cluster/images.py ``real_maxtext_train``): its own log lines, its checkpoints, which the validator
reads ``--deep``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client

from elastic_training.local import maxtext_env
from elastic_training.operators.checkpoints import DeepOptions, validate_checkpoints
from elastic_training.operators.constants import COMPLETED_STEP_RE
from elastic_training.operators.spec import LOCAL_MAXTEXT_IMAGE
from tests.support.local_cluster import K8s
from tests.support.real_maxtext import maxtext_python, model_args
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

STEPS = 12
# The suite's one description (the pod asks for no TPU: it runs on the CPU pool): the process's cluster is reused.
CLUSTER_DESCRIPTION = "v5e-small"
# Importing MaxText's trainer alone takes about a minute on a loaded 2-core machine.
RUN_TIMEOUT_S = 600.0


def test_a_non_elastic_training_pod_runs_real_maxtext(
    k8s: K8s, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The kubelet runs in this process: the catalogue finds MaxText where the fixture built it.
    monkeypatch.setenv(maxtext_env.PYTHON_ENV, str(maxtext_python()))
    args = ["src/maxtext/configs/base.yml", *model_args(tmp_path, run_name="pod", steps=STEPS)]
    body = client.V1Pod(
        metadata=client.V1ObjectMeta(name="real-maxtext"),
        spec=client.V1PodSpec(
            restart_policy="Never",
            containers=[
                client.V1Container(
                    name="jax-tpu",
                    image=LOCAL_MAXTEXT_IMAGE,
                    command=["python3", "-m", "maxtext.trainers.pre_train.train"],
                    args=args,
                )
            ],
        ),
    )
    k8s.core.create_namespaced_pod("default", body)
    try:

        def finished() -> str | None:
            phase = k8s.core.read_namespaced_pod("real-maxtext", "default").status.phase
            return phase if phase in ("Succeeded", "Failed") else None

        phase = wait_for(finished, timeout=RUN_TIMEOUT_S, interval=0.5)
        log = k8s.core.read_namespaced_pod_log("real-maxtext", "default", container="jax-tpu")
        assert phase == "Succeeded", log[-3000:]
        assert "Local stand-in" not in log and "System Information: Jax Version: 0.12" in log
        assert [int(m[1]) for m in COMPLETED_STEP_RE.finditer(log)] == list(range(STEPS))
        report = validate_checkpoints(str(tmp_path / "pod"), deep=DeepOptions())
        assert report.valid and [v.step for v in report.steps] == [STEPS - 1, 10, 0], report.to_json()
    finally:
        k8s.core.delete_namespaced_pod("real-maxtext", "default", grace_period_seconds=0)

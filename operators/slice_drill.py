"""A slice-failure drill that runs on the cluster, beside the training it breaks.

``python -m elastic_training.operators.slice_drill --run-name R --at-step N [--slice K]`` follows the newest running
head pod of run ``R`` (pods labelled with the project's ``run-name``), reads its ``jax-tpu`` log for
MaxText's ``completed step: N`` line, and then force-deletes the worker pod of slice ``K``: exactly what
``kubectl delete pod --grace-period=0 --force`` does (the API removes the pod at once; its containers are
killed without a graceful stop, as when a TPU VM disappears). It prints one ``Drill result: {json}`` line
and exits 0; 1 when the run ended or the deadline passed before the step (nothing deleted).

It runs as its own pod so that the drill happens while the pretraining task waits, whatever runs the
tasks: Airflow's scheduler (tasks in parallel) or ``dag.test()`` (one task at a time, triggers inline).
It talks to the API with the pod's own credentials (``KUBECONFIG`` when set, else in-cluster), through
the official client; it imports nothing from Airflow.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any, Final

from elastic_training.operators.constants import (
    COMPLETED_STEP_RE,
    HEAD_MAIN_CONTAINER,
    HEAD_REPLICATED_JOB,
    LABEL_JOB_INDEX,
    LABEL_REPLICATED_JOB_NAME,
    LABEL_RUN_NAME,
    WORKER_REPLICATED_JOB,
)

RESULT_PREFIX: Final = "Drill result: "
_TAIL_LINES: Final = 60


def _client() -> Any:
    from kubernetes import client, config

    if os.environ.get("KUBECONFIG"):
        api = config.new_client_from_config(config_file=os.environ["KUBECONFIG"])
    else:
        config.load_incluster_config()
        api = client.ApiClient()
    return client.CoreV1Api(api)


def _live_pods(core: Any, namespace: str, run_name: str, replicated_job: str) -> list[Any]:
    selector = f"{LABEL_RUN_NAME}={run_name},{LABEL_REPLICATED_JOB_NAME}={replicated_job}"
    pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    return sorted(
        (p for p in pods if p.metadata.deletion_timestamp is None),
        key=lambda p: p.metadata.creation_timestamp,
    )


def _latest_step(core: Any, namespace: str, head: Any) -> int | None:
    response = core.read_namespaced_pod_log(
        head.metadata.name,
        namespace,
        container=HEAD_MAIN_CONTAINER,
        tail_lines=_TAIL_LINES,
        _preload_content=False,
        _request_timeout=30,
    )
    steps = [int(m[1]) for m in COMPLETED_STEP_RE.finditer(response.data.decode(errors="replace"))]
    return max(steps) if steps else None


def run_drill(
    core: Any, *, namespace: str, run_name: str, at_step: int, slice_index: int, timeout: float, poll: float = 0.2
) -> dict[str, Any]:
    """Wait for ``at_step``, force-delete the slice's worker pod; the result (``fired`` false when it did not)."""
    deadline = time.monotonic() + timeout
    seen_running = False
    result: dict[str, Any] = {"run_name": run_name, "at_step": at_step, "slice": slice_index, "fired": False}
    while time.monotonic() < deadline:
        try:
            heads = _live_pods(core, namespace, run_name, HEAD_REPLICATED_JOB)
            running = [p for p in heads if p.status and p.status.phase == "Running"]
            if running:
                seen_running = True
                step = _latest_step(core, namespace, running[-1])
                if step is not None and step >= at_step:
                    return _kill(core, namespace, run_name, slice_index, step, result)
            elif seen_running and heads and all(p.status and p.status.phase in ("Succeeded", "Failed") for p in heads):
                result["reason"] = "the run ended before the step"
                return result
        except Exception as error:  # a pod replaced under us, or the API restarting: look again
            result["last_error"] = f"{type(error).__name__}: {error}"[:300]
        time.sleep(poll)
    result["reason"] = f"step {at_step} not reached within {timeout:.0f} s"
    return result


def _kill(
    core: Any, namespace: str, run_name: str, slice_index: int, step: int, result: dict[str, Any]
) -> dict[str, Any]:
    from kubernetes import client

    for pod in _live_pods(core, namespace, run_name, WORKER_REPLICATED_JOB):
        if (pod.metadata.labels or {}).get(LABEL_JOB_INDEX) == str(slice_index):
            # The fault is when the delete is asked: its processes can be killed, and the trainer notice, before the
            # API's answer comes back (seen under load: a detection before the answer).
            asked = time.time()
            core.delete_namespaced_pod(
                pod.metadata.name,
                namespace,
                body=client.V1DeleteOptions(grace_period_seconds=0),
                grace_period_seconds=0,
            )
            result.update(fired=True, pod=pod.metadata.name, step_seen=step, deleted_at=asked)
            return result
    result["reason"] = f"no live worker pod of slice {slice_index}"
    return result


def parse_result(log: str) -> dict[str, Any] | None:
    """The drill's result from its log (the last ``Drill result:`` line), or None."""
    found = None
    for line in log.splitlines():
        if line.startswith(RESULT_PREFIX):
            try:
                found = json.loads(line[len(RESULT_PREFIX) :])
            except ValueError:
                continue
    return found if isinstance(found, dict) else None


def drill_command(*, run_name: str, at_step: int, slice_index: int, namespace: str, timeout: int) -> list[str]:
    """The argv of the drill pod."""
    return [
        "python",
        "-m",
        "elastic_training.operators.slice_drill",
        f"--run-name={run_name}",
        f"--at-step={at_step}",
        f"--slice={slice_index}",
        f"--namespace={namespace}",
        f"--timeout={timeout}",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m elastic_training.operators.slice_drill", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--run-name", required=True)
    parser.add_argument("--at-step", type=int, required=True)
    parser.add_argument("--slice", type=int, default=0)
    parser.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE", "default"))
    parser.add_argument("--timeout", type=float, default=3600)
    args = parser.parse_args(argv)
    core = _client()
    result = run_drill(
        core,
        namespace=args.namespace,
        run_name=args.run_name,
        at_step=args.at_step,
        slice_index=args.slice,
        timeout=args.timeout,
    )
    print(RESULT_PREFIX + json.dumps(result, sort_keys=True), flush=True)
    return 0 if result["fired"] else 1


if __name__ == "__main__":
    sys.exit(main())

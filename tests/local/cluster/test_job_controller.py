"""The Job controller, driven through the real client: completions, Indexed, backoffLimit, suspend.

Suspension as kubernetes/kubernetes pkg/controller/job/job_controller.go has it (local/cluster/job_controller.py):
the pods it deletes count for nothing, however they exit; a Job's counts and completion still hold while it is
suspended; ``startTime`` is kept across a suspension and reset on resume.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from elastic_training.local.cluster import LocalCluster
from elastic_training.local.cluster.store import now_rfc3339
from elastic_training.operators.constants import (
    ANNOTATION_JOB_COMPLETION_INDEX,
    LABEL_JOB_COMPLETION_INDEX,
    LABEL_JOB_NAME,
)
from tests.support.control_plane import (
    NS,
    armed,
    condition,
    container,
    pod_pids,
    pods_of,
    unique,
    wait_armed,
    wait_processes_gone,
)
from tests.support.local_cluster import K8s
from tests.support.waiting import wait_for


def _job(name: str, script: str, *, restart_policy: str = "Never", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": restart_policy,
                    "terminationGracePeriodSeconds": 5,
                    "containers": [container("main", script)],
                }
            },
            **spec,
        },
    }


def _finished(k8s: K8s, name: str, kind: str, timeout: float = 30.0) -> client.V1Job:
    def probe() -> client.V1Job | None:
        job = k8s.batch.read_namespaced_job(name, NS)
        return job if condition(job.status.conditions, kind) else None

    return wait_for(probe, timeout)


def _pods(k8s: K8s, job: str) -> list[client.V1Pod]:
    return pods_of(k8s.core, f"{LABEL_JOB_NAME}={job}")


def _log(k8s: K8s, pod: str) -> str:
    return str(k8s.core.read_namespaced_pod_log(pod, NS, _preload_content=False).data.decode())


def test_indexed_job_runs_one_pod_per_index_and_completes(k8s: K8s) -> None:
    name = unique("indexed")
    script = 'echo "index=$JOB_COMPLETION_INDEX host=$HOSTNAME"'
    k8s.batch.create_namespaced_job(
        NS, _job(name, script, completionMode="Indexed", completions=3, parallelism=3, backoffLimit=0)
    )
    job = _finished(k8s, name, "Complete")
    assert (job.status.succeeded, job.status.failed or 0, job.status.active) == (3, 0, 0)
    assert job.status.completed_indexes == "0-2"
    pods = sorted(_pods(k8s, name), key=lambda p: p.metadata.name)
    assert len(pods) == 3
    for index, pod in enumerate(pods):
        assert pod.metadata.name.startswith(f"{name}-{index}-") and len(pod.metadata.name) == len(name) + 8
        assert pod.metadata.labels[LABEL_JOB_COMPLETION_INDEX] == str(index)
        assert pod.metadata.annotations[ANNOTATION_JOB_COMPLETION_INDEX] == str(index)
        assert pod.spec.hostname == f"{name}-{index}"
        assert pod.metadata.owner_references[0].kind == "Job"
        assert _log(k8s, pod.metadata.name).strip() == f"index={index} host={name}-{index}"


def test_non_indexed_job_respects_parallelism_and_completions(k8s: K8s, tmp_path: Any) -> None:
    name = unique("parallel")
    trace = tmp_path / "trace"
    # Each pod waits until two have started, so the first two are seen running together even when a loaded
    # machine starts them far apart; the third starts only when one of them has finished.
    both_started = f'until [ "$(grep -c + {trace})" -ge 2 ]; do sleep 0.05; done'
    k8s.batch.create_namespaced_job(
        NS, _job(name, f"echo + >> {trace}; {both_started}; sleep 0.3; echo - >> {trace}", completions=3, parallelism=2)
    )
    job = _finished(k8s, name, "Complete")
    assert job.status.succeeded == 3
    pods = _pods(k8s, name)
    assert len(pods) == 3
    assert all(p.metadata.name.startswith(f"{name}-") and len(p.metadata.name) == len(name) + 6 for p in pods)
    running, most = 0, 0
    for mark in trace.read_text().split():
        running += 1 if mark == "+" else -1
        most = max(most, running)
    assert most == 2


def test_never_pods_fail_until_backoff_limit_exceeded(k8s: K8s) -> None:
    name = unique("never")
    k8s.batch.create_namespaced_job(NS, _job(name, "exit 1", backoffLimit=1))
    job = _finished(k8s, name, "Failed")
    failed = condition(job.status.conditions, "Failed")
    assert (failed.reason, failed.message) == ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
    assert job.status.failed == 2
    pods = _pods(k8s, name)
    assert len(pods) == 2 and all(p.status.phase == "Failed" for p in pods)  # failed pods stay, new ones made


def test_on_failure_container_restarts_count_against_backoff_limit(k8s: K8s) -> None:
    name = unique("onfailure")
    k8s.batch.create_namespaced_job(NS, _job(name, "exit 2", restart_policy="OnFailure", backoffLimit=2))
    job = _finished(k8s, name, "Failed")
    assert condition(job.status.conditions, "Failed").reason == "BackoffLimitExceeded"
    wait_for(lambda: not _pods(k8s, name), timeout=30)  # the restarting pod is deleted
    assert len(k8s.core.list_namespaced_event(NS, field_selector=f"involvedObject.name={name}").items) >= 1


def test_deleted_pod_is_replaced_and_counts_as_failed(k8s: K8s, cluster: LocalCluster) -> None:
    name = unique("replace")
    k8s.batch.create_namespaced_job(
        NS, _job(name, "sleep 30", completionMode="Indexed", completions=1, parallelism=1, backoffLimit=1)
    )
    first = wait_for(lambda: [p for p in _pods(k8s, name) if p.status.phase == "Running"])[0]
    cluster.faults.delete_pod(NS, first.metadata.name)
    second = wait_for(lambda: [p for p in _pods(k8s, name) if p.metadata.name != first.metadata.name])[0]
    assert second.metadata.labels[LABEL_JOB_COMPLETION_INDEX] == "0"
    job = wait_for(lambda: (j := k8s.batch.read_namespaced_job(name, NS)).status.failed == 1 and j)
    assert not condition(job.status.conditions, "Failed")
    wait_processes_gone(pod_pids(first))
    k8s.batch.delete_namespaced_job(name, NS, propagation_policy="Foreground")


def test_suspend_deletes_pods_without_counting_failures_and_resume_recreates(k8s: K8s) -> None:
    name = unique("suspend")
    k8s.batch.create_namespaced_job(NS, _job(name, "sleep 30", suspend=True, backoffLimit=0))
    job = _finished(k8s, name, "Suspended")
    assert condition(job.status.conditions, "Suspended").reason == "JobSuspended"
    # The reconcile that wrote Suspended would have made its pods before writing the status: none now, none made.
    assert not _pods(k8s, name) and not job.status.active
    k8s.batch.patch_namespaced_job(name, NS, {"spec": {"suspend": False}})
    pod = wait_for(lambda: [p for p in _pods(k8s, name) if p.status.phase == "Running"])[0]
    k8s.batch.patch_namespaced_job(name, NS, {"spec": {"suspend": True}})
    wait_for(lambda: not _pods(k8s, name), timeout=30)
    job = k8s.batch.read_namespaced_job(name, NS)
    assert not condition(job.status.conditions, "Failed") and not job.status.failed
    wait_processes_gone(pod_pids(pod))
    k8s.batch.delete_namespaced_job(name, NS)


def _suspended_condition(job: client.V1Job) -> tuple[str, str, str] | None:
    found = next((c for c in job.status.conditions or [] if c.type == "Suspended"), None)
    return None if found is None else (found.status, found.reason, found.message)


def _running(k8s: K8s, name: str, other_than: str = "") -> client.V1Pod:
    running = wait_for(
        lambda: [p for p in _pods(k8s, name) if p.status.phase == "Running" and p.metadata.name != other_than], 60
    )
    return running[0]


def _after(stamp: datetime) -> bool:
    """The API server's clock (whole seconds) has passed ``stamp``: a stamp made now differs from it."""
    return now_rfc3339() > stamp.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_pods_a_suspension_terminates_count_for_nothing_even_exiting_0_and_resume_starts_anew(
    k8s: K8s, tmp_path: Path
) -> None:
    trace = tmp_path / "terminated"
    name = unique("suspend-exit0")
    # The trainer's way: SIGTERM is a request to stop, answered with exit 0.
    k8s.batch.create_namespaced_job(
        NS, _job(name, armed(f"trap 'echo exit-0 >> {trace}; exit 0' TERM"), completions=1, backoffLimit=0)
    )
    first = _running(k8s, name)
    wait_armed(k8s.core, first.metadata.name)
    started = k8s.batch.read_namespaced_job(name, NS).status.start_time
    assert started is not None and _suspended_condition(k8s.batch.read_namespaced_job(name, NS)) is None

    k8s.batch.patch_namespaced_job(name, NS, {"spec": {"suspend": True}})
    wait_for(lambda: not _pods(k8s, name), 60)
    assert trace.read_text().split() == ["exit-0"]  # it ran its trap
    job = wait_for(lambda: (j := k8s.batch.read_namespaced_job(name, NS)).status.terminating == 0 and j, 30)
    assert (job.status.succeeded or 0, job.status.failed or 0, job.status.active or 0) == (0, 0, 0)
    assert not condition(job.status.conditions, "Complete") and not condition(job.status.conditions, "Failed")
    assert _suspended_condition(job) == ("True", "JobSuspended", "Job suspended")
    assert job.status.start_time == started  # kept across the suspension (JobSet clears it to resume)
    wait_processes_gone(pod_pids(first))

    wait_for(lambda: _after(started), 5)
    k8s.batch.patch_namespaced_job(name, NS, {"spec": {"suspend": False}})
    second = _running(k8s, name, other_than=first.metadata.name)
    job = k8s.batch.read_namespaced_job(name, NS)
    assert _suspended_condition(job) == ("False", "JobResumed", "Job resumed")
    assert job.status.start_time > started  # reset on resume
    reasons = [e.reason for e in k8s.core.list_namespaced_event(NS, field_selector=f"involvedObject.name={name}").items]
    assert "Suspended" in reasons and "Resumed" in reasons
    k8s.batch.delete_namespaced_job(name, NS, propagation_policy="Foreground")
    wait_processes_gone(pod_pids(second))


def test_a_job_created_suspended_has_no_start_time_until_it_resumes(k8s: K8s) -> None:
    name = unique("created-suspended")
    k8s.batch.create_namespaced_job(NS, _job(name, "true", suspend=True))
    job = _finished(k8s, name, "Suspended")
    assert job.status.start_time is None and _suspended_condition(job) == ("True", "JobSuspended", "Job suspended")
    k8s.batch.patch_namespaced_job(name, NS, {"spec": {"suspend": False}})
    job = _finished(k8s, name, "Complete")
    assert job.status.start_time is not None and job.status.succeeded == 1
    assert _suspended_condition(job) == ("False", "JobResumed", "Job resumed")
    k8s.batch.delete_namespaced_job(name, NS, propagation_policy="Foreground")


def test_a_pod_terminating_for_another_reason_still_counts_and_completes_a_suspended_job(
    k8s: K8s, tmp_path: Path
) -> None:
    """A pod deleted by someone else (an eviction, a drain) is no longer active: the suspension does not take it,
    it keeps upstream's tracking finalizer, and with a podFailurePolicy (the head Job's) it counts by the phase it
    ends in. Exiting 0, it is a completion: the suspended Job is Complete (syncJob checks completion while
    suspended). This, not the suspension's own SIGTERM, is how a preempted JobSet's head Job can complete on GKE."""
    go = tmp_path / "go"
    name = unique("suspend-other")
    manifest = _job(
        name,
        armed(f"trap 'until [ -e {go} ]; do sleep 0.05; done; exit 0' TERM"),
        completions=1,
        backoffLimit=0,
        podFailurePolicy={"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]},
    )
    manifest["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 120
    k8s.batch.create_namespaced_job(NS, manifest)
    pod = _running(k8s, name)
    wait_armed(k8s.core, pod.metadata.name)
    k8s.core.delete_namespaced_pod(pod.metadata.name, NS)  # graceful: it runs its trap, waiting for `go`
    k8s.batch.patch_namespaced_job(name, NS, {"spec": {"suspend": True}})
    job = _finished(k8s, name, "Suspended")
    assert not job.status.succeeded and job.status.terminating == 1
    go.touch()
    job = _finished(k8s, name, "Complete", timeout=60)
    assert job.status.succeeded == 1 and not job.status.failed
    assert job.spec.suspend is True
    wait_processes_gone(pod_pids(pod))
    k8s.batch.delete_namespaced_job(name, NS, propagation_policy="Foreground")


@pytest.mark.parametrize("field", ["nodeSelector", "image"])
def test_a_jobs_template_changes_only_in_scheduling_directives_while_suspended_and_not_started(
    k8s: K8s, field: str
) -> None:
    name = unique("template")
    k8s.batch.create_namespaced_job(NS, _job(name, "sleep 30", suspend=True))
    _finished(k8s, name, "Suspended")
    change: dict[str, Any] = (
        {"nodeSelector": {"pool": "a"}}
        if field == "nodeSelector"
        else {"containers": [{**container("main", "sleep 30"), "image": "other"}]}
    )

    def patch() -> client.V1Job:
        return k8s.batch.patch_namespaced_job(name, NS, {"spec": {"template": {"spec": change}}})

    if field == "image":  # never mutable
        with pytest.raises(client.ApiException) as caught:
            patch()
        assert caught.value.status == 422 and "spec.template" in caught.value.body
        assert "field is immutable" in caught.value.body
        k8s.batch.delete_namespaced_job(name, NS)
        return
    assert patch().spec.template.spec.node_selector == {"pool": "a"}  # suspended, never started: allowed
    k8s.batch.patch_namespaced_job(name, NS, {"spec": {"suspend": False, "template": {"spec": {"nodeSelector": None}}}})
    pod = _running(k8s, name)
    k8s.batch.patch_namespaced_job(name, NS, {"spec": {"suspend": True}})
    wait_for(lambda: not _pods(k8s, name), 60)
    assert k8s.batch.read_namespaced_job(name, NS).status.start_time is not None
    with pytest.raises(client.ApiException) as caught:
        patch()  # suspended but started: refused
    assert caught.value.status == 422 and "field is immutable" in caught.value.body
    # What JobSet does before resuming a child Job: clear its startTime, then change the directives.
    k8s.batch.patch_namespaced_job_status(name, NS, {"status": {"startTime": None}})
    assert patch().spec.template.spec.node_selector == {"pool": "a"}
    wait_processes_gone(pod_pids(pod))
    k8s.batch.delete_namespaced_job(name, NS)


def test_active_deadline_fails_the_job(k8s: K8s) -> None:
    name = unique("deadline")
    k8s.batch.create_namespaced_job(NS, _job(name, "sleep 30", activeDeadlineSeconds=1, backoffLimit=0))
    job = _finished(k8s, name, "Failed")
    assert condition(job.status.conditions, "Failed").reason == "DeadlineExceeded"
    wait_for(lambda: not _pods(k8s, name), timeout=30)

"""The JobSet controller through the real client: the scenarios of a Pathways-shaped JobSet."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from elastic_training.local.cluster import LocalCluster
from elastic_training.local.cluster.store import now_rfc3339
from elastic_training.operators.constants import (
    ANNOTATION_COORDINATOR,
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
    LABEL_GLOBAL_REPLICAS,
    LABEL_JOB_GLOBAL_INDEX,
    LABEL_JOB_INDEX,
    LABEL_JOB_KEY,
    LABEL_JOBSET_NAME,
    LABEL_JOBSET_UID,
    LABEL_REPLICATED_JOB_NAME,
    LABEL_REPLICATED_JOB_REPLICAS,
    LABEL_RESTART_ATTEMPT,
)
from tests.support.control_plane import (
    NS,
    JobSets,
    condition,
    job_template,
    jobset_manifest,
    pod_pids,
    pods_of,
    unique,
    wait_processes_gone,
)
from tests.support.local_cluster import K8s
from tests.support.waiting import wait_for

HEAD, WORKER = "head", "worker"
SLEEP = "sleep 300"  # outlives any wait below: a state held in place, not a race with the clock


@pytest.fixture(autouse=True)
def _no_jobset_left_running(k8s: K8s) -> Iterator[None]:
    """A test that failed half-way must not leave its pods running, loading the machine, for the next ones."""
    yield
    jobsets = JobSets(k8s.custom)
    for jobset in k8s.custom.list_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, NS, JOBSET_PLURAL)["items"]:
        if not jobset["metadata"].get("deletionTimestamp"):
            try:
                jobsets.delete(jobset["metadata"]["name"])
            except client.ApiException as err:
                if err.status != 404:  # 404: gone meanwhile (ttlSecondsAfterFinished)
                    raise


def _pathways_like(
    name: str,
    head_script: str = "sleep 0.5",
    worker_script: str = SLEEP,
    *,
    worker_backoff: int = 1,
    **spec: Any,
) -> dict[str, Any]:
    """Head (1 replica, backoffLimit 0, Never) + 2 worker slices of 2 VMs (OnFailure), as in docs/architecture.md §3."""
    return jobset_manifest(
        name,
        {
            HEAD: job_template(head_script, grace=5),
            WORKER: job_template(
                worker_script,
                replicas=2,
                completions=2,
                backoff_limit=worker_backoff,
                restart_policy="OnFailure",
                grace=5,
            ),
        },
        coordinator={"replicatedJob": HEAD},
        successPolicy={"operator": "All", "targetReplicatedJobs": [HEAD]},
        **spec,
    )


def _status_when(jobsets: JobSets, name: str, probe: Any, timeout: float = 30.0) -> dict[str, Any]:
    return wait_for(lambda: (status := jobsets.status(name)) and probe(status) and status, timeout)


def _terminal(jobsets: JobSets, name: str, timeout: float = 30.0) -> dict[str, Any]:
    return _status_when(jobsets, name, lambda s: s.get("terminalState"), timeout)


def _jobs(k8s: K8s, jobset: str) -> list[client.V1Job]:
    items: list[client.V1Job] = k8s.batch.list_namespaced_job(NS, label_selector=f"{LABEL_JOBSET_NAME}={jobset}").items
    return items


def _running_pods(k8s: K8s, selector: str, count: int, *, other_than: str = "") -> list[client.V1Pod]:
    """At least ``count`` running pods matching ``selector`` (none named ``other_than``)."""

    def probe() -> list[client.V1Pod] | None:
        pods = [
            p
            for p in pods_of(k8s.core, selector)
            if p.status and p.status.phase == "Running" and pod_pids(p) and p.metadata.name != other_than
        ]
        return pods if len(pods) >= count else None

    return wait_for(probe, 30)


def _until_flag(flag: Path) -> str:
    """A script that waits until the test creates ``flag``: it holds a state the test must observe."""
    return f"while [ ! -e {flag} ]; do sleep 0.05; done"


def _events(k8s: K8s, name: str) -> list[client.CoreV1Event]:
    items: list[client.CoreV1Event] = k8s.core.list_namespaced_event(
        NS, field_selector=f"involvedObject.name={name}"
    ).items
    return items


def test_children_carry_upstream_labels_annotations_and_coordinator(k8s: K8s) -> None:
    jobsets = JobSets(k8s.custom)
    name = unique("labels")
    created = jobsets.create(_pathways_like(name, head_script=SLEEP, network={"enableDNSHostnames": True}))
    pods = _running_pods(k8s, f"{LABEL_JOBSET_NAME}={name}", 5)
    jobs = {j.metadata.name: j for j in _jobs(k8s, name)}
    assert sorted(jobs) == [f"{name}-{HEAD}-0", f"{name}-{WORKER}-0", f"{name}-{WORKER}-1"]
    worker1 = jobs[f"{name}-{WORKER}-1"]
    expected = {
        LABEL_JOBSET_NAME: name,
        LABEL_JOBSET_UID: created["metadata"]["uid"],
        LABEL_REPLICATED_JOB_NAME: WORKER,
        LABEL_REPLICATED_JOB_REPLICAS: "2",
        LABEL_GLOBAL_REPLICAS: "3",
        LABEL_JOB_INDEX: "1",
        LABEL_JOB_GLOBAL_INDEX: "2",
        LABEL_RESTART_ATTEMPT: "0",
        LABEL_JOB_KEY: hashlib.sha1(f"{NS}/{name}-{WORKER}-1".encode()).hexdigest(),
        ANNOTATION_COORDINATOR: f"{name}-{HEAD}-0-0.{name}",
    }
    for meta in (worker1.metadata, worker1.spec.template.metadata):
        assert expected.items() <= meta.labels.items()
        assert expected.items() <= meta.annotations.items()
    owner = worker1.metadata.owner_references[0]
    assert (owner.kind, owner.name, owner.uid, owner.controller) == ("JobSet", name, created["metadata"]["uid"], True)
    worker_pods = [p for p in pods if p.metadata.labels[LABEL_JOB_INDEX] == "1" and WORKER in p.metadata.name]
    assert sorted(p.metadata.name.rsplit("-", 1)[0] for p in worker_pods) == [
        f"{name}-{WORKER}-1-0",
        f"{name}-{WORKER}-1-1",
    ]
    assert all(p.spec.subdomain == name for p in pods)
    assert worker_pods[0].metadata.annotations[ANNOTATION_COORDINATOR] == f"{name}-{HEAD}-0-0.{name}"
    # Every pod runs, so every Job is active and ready; the counts are per replicated job, in spec order.
    counts = {"succeeded": 0, "failed": 0, "suspended": 0}
    expected_status = [
        {"name": HEAD, "ready": 1, "active": 1, **counts},
        {"name": WORKER, "ready": 2, "active": 2, **counts},
    ]
    _status_when(jobsets, name, lambda s: s.get("replicatedJobsStatus") == expected_status)
    jobsets.delete(name)


def test_head_only_success_policy_completes_and_cleans_workers(k8s: K8s, tmp_path: Path) -> None:
    workers_seen = tmp_path / "workers-seen"  # the head finishes only after the test saw every worker run
    jobsets = JobSets(k8s.custom)
    name = unique("success")
    jobsets.create(_pathways_like(name, head_script=_until_flag(workers_seen), failurePolicy={"maxRestarts": 1}))
    workers = _running_pods(k8s, f"{LABEL_JOBSET_NAME}={name},{LABEL_REPLICATED_JOB_NAME}={WORKER}", 4)
    pids = [pid for pod in workers for pid in pod_pids(pod)]
    workers_seen.touch()
    status = _terminal(jobsets, name)
    assert status["terminalState"] == "Completed"
    completed = condition(status["conditions"], "Completed")
    assert (completed["reason"], completed["message"]) == ("AllJobsCompleted", "jobset completed successfully")
    assert status["restarts"] == 0
    wait_for(lambda: [j.metadata.name for j in _jobs(k8s, name)] == [f"{name}-{HEAD}-0"], 30)
    wait_for(lambda: not pods_of(k8s.core, f"{LABEL_JOBSET_NAME}={name},{LABEL_REPLICATED_JOB_NAME}={WORKER}"), 30)
    wait_processes_gone(pids)
    head = {r["name"]: r for r in jobsets.status(name)["replicatedJobsStatus"]}[HEAD]
    assert head["succeeded"] == 1
    jobsets.delete(name)


def test_deleted_worker_pod_is_replaced_without_a_jobset_restart(k8s: K8s, cluster: LocalCluster) -> None:
    jobsets = JobSets(k8s.custom)
    name = unique("podkill")
    jobsets.create(_pathways_like(name, head_script=SLEEP, worker_backoff=2, failurePolicy={"maxRestarts": 3}))
    selector = f"{LABEL_JOBSET_NAME}={name},{LABEL_REPLICATED_JOB_NAME}={WORKER},{LABEL_JOB_INDEX}=0"
    victim = _running_pods(k8s, selector, 2)[0]
    cluster.faults.delete_pod(NS, victim.metadata.name)
    replacement = _running_pods(k8s, selector, 2, other_than=victim.metadata.name)  # the survivor and the new pod
    assert len(replacement) == 2
    assert all(p.metadata.labels[LABEL_RESTART_ATTEMPT] == "0" for p in replacement)
    wait_processes_gone(pod_pids(victim))
    job = k8s.batch.read_namespaced_job(f"{name}-{WORKER}-0", NS)
    assert job.status.failed == 1 and not condition(job.status.conditions, "Failed")
    status = jobsets.status(name)
    assert status["restarts"] == 0 and "terminalState" not in status
    jobsets.delete(name)


@pytest.mark.parametrize("strategy", ["Recreate", "BlockingRecreate"])
def test_worker_over_backoff_limit_restarts_the_jobset(k8s: K8s, strategy: str) -> None:
    jobsets = JobSets(k8s.custom)
    name = unique("restart")
    policy = {"maxRestarts": 2, "restartStrategy": strategy}
    jobsets.create(_pathways_like(name, head_script=SLEEP, worker_backoff=0, failurePolicy=policy))
    first = _running_pods(k8s, f"{LABEL_JOBSET_NAME}={name}", 5)
    victim = next(p for p in first if p.metadata.labels[LABEL_REPLICATED_JOB_NAME] == WORKER)
    k8s.core.delete_namespaced_pod(victim.metadata.name, NS, grace_period_seconds=0)  # 1 failure > backoffLimit 0
    status = _status_when(jobsets, name, lambda s: s.get("restarts") == 1)
    assert status["restartsCountTowardsMax"] == 1
    restarting = condition(status["conditions"], "RestartingJobSet")
    assert restarting["reason"] == "DefaultFailurePolicy"
    assert restarting["message"].startswith("applying RestartJobSet failure policy action (first failed job: ")

    def recreated() -> list[client.V1Job] | None:
        jobs = _jobs(k8s, name)
        fresh = [j for j in jobs if j.metadata.labels[LABEL_RESTART_ATTEMPT] == "1"]
        return fresh if len(fresh) == 3 and len(jobs) == 3 else None

    jobs = wait_for(recreated, 30)
    assert sorted(j.metadata.name for j in jobs) == sorted(
        f"{name}-{r}-{i}" for r, i in [(HEAD, 0), (WORKER, 0), (WORKER, 1)]
    )
    second = _running_pods(k8s, f"{LABEL_JOBSET_NAME}={name},{LABEL_RESTART_ATTEMPT}=1", 5)
    assert all(p.metadata.annotations[LABEL_RESTART_ATTEMPT] == "1" for p in second)
    wait_processes_gone([pid for pod in first for pid in pod_pids(pod)])
    reasons = [e.reason for e in _events(k8s, name)]
    assert "RestartJobSetFailurePolicyAction" in reasons
    jobsets.delete(name)


def test_max_restarts_spent_fails_the_jobset(k8s: K8s) -> None:
    jobsets = JobSets(k8s.custom)
    name = unique("maxrestarts")
    jobsets.create(
        _pathways_like(
            name, head_script=SLEEP, worker_script="exit 1", worker_backoff=0, failurePolicy={"maxRestarts": 1}
        )
    )
    status = _terminal(jobsets, name)
    assert (status["terminalState"], status["restarts"], status["restartsCountTowardsMax"]) == ("Failed", 1, 1)
    failed = condition(status["conditions"], "Failed")
    assert failed["reason"] == "ReachedMaxRestarts"
    assert failed["message"].startswith("jobset failed due to reaching max number of restarts (first failed job: ")
    assert f"{name}-{WORKER}-" in failed["message"]
    wait_for(lambda: not pods_of(k8s.core, f"{LABEL_JOBSET_NAME}={name},{LABEL_REPLICATED_JOB_NAME}={HEAD}"), 30)
    warnings = {e.reason for e in _events(k8s, name) if e.type == "Warning"}
    assert {"ReachedMaxRestarts", "RestartJobSetFailurePolicyAction"} <= warnings
    jobsets.delete(name)


def test_fail_jobset_rule_fails_at_once(k8s: K8s) -> None:
    jobsets = JobSets(k8s.custom)
    name = unique("failrule")
    rules = [
        {"name": "head-fails", "action": "FailJobSet", "targetReplicatedJobs": [HEAD]},
        {"name": "worker-backoff", "action": "FailJobSet", "onJobFailureReasons": ["BackoffLimitExceeded"]},
    ]
    jobsets.create(
        _pathways_like(
            name,
            head_script=SLEEP,
            worker_script="exit 1",
            worker_backoff=0,
            failurePolicy={"maxRestarts": 5, "rules": rules},
        )
    )
    status = _terminal(jobsets, name)
    assert (status["terminalState"], status["restarts"]) == ("Failed", 0)
    failed = condition(status["conditions"], "Failed")
    assert failed["reason"] == "FailJobSetFailurePolicyAction"
    assert failed["message"].startswith("applying FailJobSet failure policy action (first failed job: ")
    jobsets.delete(name)


def test_restart_ignoring_max_restarts_does_not_spend_the_budget(k8s: K8s, cluster: LocalCluster) -> None:
    jobsets = JobSets(k8s.custom)
    name = unique("ignoremax")
    rules = [
        # Two rules the worker's failure must not match: another target, another reason. Either would fail the
        # JobSet at once if its filter were ignored.
        {"name": "head-only", "action": "FailJobSet", "targetReplicatedJobs": [HEAD]},
        {"name": "deadline-only", "action": "FailJobSet", "onJobFailureReasons": ["DeadlineExceeded"]},
        {
            "name": "free",
            "action": "RestartJobSetAndIgnoreMaxRestarts",
            "onJobFailureReasons": ["BackoffLimitExceeded"],
            "targetReplicatedJobs": [WORKER],
        },
    ]
    jobsets.create(
        _pathways_like(name, head_script=SLEEP, worker_backoff=0, failurePolicy={"maxRestarts": 0, "rules": rules})
    )
    victim = _running_pods(k8s, f"{LABEL_JOBSET_NAME}={name},{LABEL_REPLICATED_JOB_NAME}={WORKER}", 4)[0]
    cluster.faults.delete_pod(NS, victim.metadata.name)
    # maxRestarts 0: a restart that counted would have failed the JobSet with ReachedMaxRestarts instead.
    status = _status_when(jobsets, name, lambda s: s.get("restarts") == 1)
    assert status["restartsCountTowardsMax"] == 0 and "terminalState" not in status
    restarting = condition(status["conditions"], "RestartingJobSet")
    assert restarting["reason"] == "FailurePolicy_free"
    assert restarting["message"].startswith(
        f"applying RestartJobSetAndIgnoreMaxRestarts failure policy action (first failed job: {name}-{WORKER}-"
    )
    _running_pods(k8s, f"{LABEL_JOBSET_NAME}={name},{LABEL_RESTART_ATTEMPT}=1", 5)  # the next attempt runs
    status = jobsets.status(name)
    assert (status["restarts"], status["restartsCountTowardsMax"], status.get("terminalState")) == (1, 0, None)
    jobsets.delete(name)


def test_no_failure_policy_fails_at_the_first_failed_job(k8s: K8s) -> None:
    jobsets = JobSets(k8s.custom)
    name = unique("nopolicy")
    jobsets.create(_pathways_like(name, head_script="exit 4"))
    status = _terminal(jobsets, name)
    failed = condition(status["conditions"], "Failed")
    assert (failed["reason"], failed["message"]) == (
        "FailedJobs",
        f"jobset failed due to one or more job failures (first failed job: {name}-{HEAD}-0)",
    )
    assert status["replicatedJobsStatus"][0] == {
        "name": HEAD,
        "ready": 0,
        "succeeded": 0,
        "failed": 1,
        "active": 0,
        "suspended": 0,
    }
    jobsets.delete(name)


def test_success_policy_any(k8s: K8s) -> None:
    jobsets = JobSets(k8s.custom)
    name = unique("any")
    manifest = jobset_manifest(
        name,
        {"fast": job_template("true"), "slow": job_template(SLEEP, grace=5)},
        successPolicy={"operator": "Any"},
    )
    jobsets.create(manifest)
    assert _terminal(jobsets, name)["terminalState"] == "Completed"
    wait_for(lambda: [j.metadata.name for j in _jobs(k8s, name)] == [f"{name}-fast-0"], 30)
    jobsets.delete(name)


def test_suspend_and_resume(k8s: K8s) -> None:
    jobsets = JobSets(k8s.custom)
    name = unique("suspend")
    jobsets.create(jobset_manifest(name, {HEAD: job_template("sleep 0.3", grace=5)}, suspend=True))
    # The pass that creates the suspended Job counts it in replicatedJobsStatus only on the next pass
    # (as upstream: the status is computed from the Jobs listed at the start of a reconcile).
    status = _status_when(
        jobsets,
        name,
        lambda s: condition(s.get("conditions"), "Suspended") and s["replicatedJobsStatus"][0]["suspended"] == 1,
    )
    suspended = condition(status["conditions"], "Suspended")
    assert (suspended["reason"], suspended["message"]) == ("SuspendedJobs", "jobset is suspended")
    job = wait_for(lambda: _jobs(k8s, name), 30)[0]
    assert job.spec.suspend is True
    assert not pods_of(k8s.core, f"{LABEL_JOBSET_NAME}={name}")
    jobsets.patch(name, {"spec": {"suspend": False}})
    status = _terminal(jobsets, name)
    assert status["terminalState"] == "Completed"
    resumed = next(c for c in status["conditions"] if c["type"] == "Suspended")
    assert (resumed["status"], resumed["reason"]) == ("False", "ResumeJobs")
    jobsets.delete(name)


def test_a_resumed_child_job_starts_anew_with_the_template_changed_while_suspended(k8s: K8s) -> None:
    """Kueue's preemption and re-admission, JobSet's part: the suspended child Job keeps its startTime (the Job
    controller does not clear it); upstream resumeJob clears it, merges the pod template fields changed while the
    JobSet was suspended (the API allows that only without a startTime) and unsuspends; the Job's startTime is new."""
    jobsets = JobSets(k8s.custom)
    name = unique("resume")
    jobsets.create(jobset_manifest(name, {HEAD: job_template(SLEEP, grace=5)}))
    [first] = _running_pods(k8s, f"{LABEL_JOBSET_NAME}={name}", 1)
    [job] = _jobs(k8s, name)
    started = job.status.start_time
    assert started is not None
    jobsets.patch(name, {"spec": {"suspend": True}})
    wait_for(lambda: not pods_of(k8s.core, f"{LABEL_JOBSET_NAME}={name}"), 60)
    [job] = _jobs(k8s, name)
    assert job.spec.suspend is True and job.status.start_time == started
    assert condition(job.status.conditions, "Suspended").reason == "JobSuspended"
    wait_processes_gone(pod_pids(first))
    annotations = {"admitted-again": "yes"}
    jobsets.patch(name, {"spec": {"replicatedJobs": [_with_pod_annotations(jobsets.get(name), annotations)]}})
    wait_for(lambda: now_rfc3339() > started.strftime("%Y-%m-%dT%H:%M:%SZ"), 5)
    jobsets.patch(name, {"spec": {"suspend": False}})
    [second] = _running_pods(k8s, f"{LABEL_JOBSET_NAME}={name}", 1, other_than=first.metadata.name)
    assert (second.metadata.annotations or {}).get("admitted-again") == "yes"
    [job] = _jobs(k8s, name)
    assert job.spec.suspend is False and job.status.start_time > started
    assert job.spec.template.metadata.annotations["admitted-again"] == "yes"
    jobsets.delete(name)
    wait_processes_gone(pod_pids(second))


def _with_pod_annotations(jobset: dict[str, Any], annotations: dict[str, str]) -> dict[str, Any]:
    [rjob] = jobset["spec"]["replicatedJobs"]
    pod_meta = rjob["template"]["spec"]["template"].setdefault("metadata", {})
    pod_meta["annotations"] = {**(pod_meta.get("annotations") or {}), **annotations}
    return dict(rjob)


def test_foreground_delete_leaves_no_job_pod_or_process(k8s: K8s) -> None:
    jobsets = JobSets(k8s.custom)
    name = unique("delete")
    jobsets.create(_pathways_like(name, head_script=SLEEP))
    pods = _running_pods(k8s, f"{LABEL_JOBSET_NAME}={name}", 5)
    pids = [pid for pod in pods for pid in pod_pids(pod)]
    jobsets.delete(name, propagation="Foreground")  # 202 Accepted: the client returns no body for it
    wait_for(lambda: not jobsets.exists(name), 30)
    assert not _jobs(k8s, name)
    assert not pods_of(k8s.core, f"{LABEL_JOBSET_NAME}={name}")
    wait_processes_gone(pids)


def test_in_order_startup_creates_workers_once_the_head_is_ready(k8s: K8s, tmp_path: Path) -> None:
    warmed_up = tmp_path / "warmed-up"  # the head stays initialising until the test has looked
    jobsets = JobSets(k8s.custom)
    name = unique("inorder")
    warmup = {"name": "warmup", "image": "local", "command": ["sh", "-c", _until_flag(warmed_up)]}
    head = job_template(SLEEP, grace=5, initContainers=[warmup])
    manifest = jobset_manifest(
        name,
        {HEAD: head, WORKER: job_template(SLEEP, replicas=2, grace=5)},
        startupPolicy={"startupPolicyOrder": "InOrder"},
    )
    jobsets.create(manifest)
    in_progress = _status_when(jobsets, name, lambda s: condition(s.get("conditions"), "StartupPolicyInProgress"))
    assert in_progress["replicatedJobsStatus"][0]["ready"] == 0
    assert [j.metadata.name for j in _jobs(k8s, name)] == [f"{name}-{HEAD}-0"]  # the head is still initialising
    warmed_up.touch()
    status = _status_when(jobsets, name, lambda s: condition(s.get("conditions"), "StartupPolicyCompleted"))
    assert condition(status["conditions"], "StartupPolicyCompleted")["reason"] == "InOrderStartupPolicyCompleted"
    assert len(_jobs(k8s, name)) == 3
    jobsets.delete(name)


def test_ttl_after_finished_deletes_the_jobset(k8s: K8s) -> None:
    jobsets = JobSets(k8s.custom)
    name = unique("ttl")
    jobsets.create(jobset_manifest(name, {HEAD: job_template("true")}, ttlSecondsAfterFinished=1))
    assert _terminal(jobsets, name)["terminalState"] == "Completed"
    wait_for(lambda: not jobsets.exists(name), 30)
    assert not _jobs(k8s, name)


def test_pathways_shaped_head_with_sidecars_and_coordinator_env(k8s: K8s, tmp_path: Path) -> None:
    """docs/architecture.md §3: proxy and RM sidecars (no command: idle placeholders), jax-tpu reads the coordinator."""
    workers_seen = tmp_path / "workers-seen"  # the head finishes only after the test saw every worker run
    jobsets = JobSets(k8s.custom)
    name = unique("pathways")
    coordinator_env = {
        "name": "PATHWAYS_HEAD",
        "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{ANNOTATION_COORDINATOR}']"}},
    }
    main = {
        "name": "jax-tpu",
        "image": "local",
        "command": ["sh", "-c", f'echo "$JAX_BACKEND_TARGET"; {_until_flag(workers_seen)}'],
        "env": [coordinator_env, {"name": "JAX_BACKEND_TARGET", "value": "grpc://$(PATHWAYS_HEAD):29000"}],
    }
    sidecars = [
        {"name": "pathways-proxy", "image": "local", "restartPolicy": "Always", "args": ["--server_port=29000"]},
        {"name": "pathways-rm", "image": "local", "restartPolicy": "Always", "args": ["--instance_count=2"]},
    ]
    head = job_template(None, grace=5, initContainers=sidecars)
    head["template"]["spec"]["template"]["spec"]["containers"] = [main]
    manifest = jobset_manifest(
        name,
        {
            HEAD: head,
            WORKER: job_template(
                SLEEP, replicas=2, completions=2, backoff_limit=4, restart_policy="OnFailure", grace=5
            ),
        },
        coordinator={"replicatedJob": HEAD},
        network={"enableDNSHostnames": True},
        successPolicy={"operator": "All", "targetReplicatedJobs": [HEAD]},
        failurePolicy={"restartStrategy": "Recreate", "maxRestarts": 1},
    )
    jobsets.create(manifest)
    pods = _running_pods(k8s, f"{LABEL_JOBSET_NAME}={name},{LABEL_REPLICATED_JOB_NAME}={WORKER}", 4)
    workers_seen.touch()
    status = _terminal(jobsets, name)
    assert status["terminalState"] == "Completed"
    head_pod = pods_of(k8s.core, f"{LABEL_JOBSET_NAME}={name},{LABEL_REPLICATED_JOB_NAME}={HEAD}")[0]
    log = k8s.core.read_namespaced_pod_log(head_pod.metadata.name, NS, container="jax-tpu", _preload_content=False)
    assert log.data.decode().strip() == f"grpc://{name}-{HEAD}-0-0.{name}:29000"
    assert head_pod.status.phase == "Succeeded"
    assert all(s.state.terminated for s in head_pod.status.init_container_statuses)  # sidecars stopped
    wait_processes_gone([pid for pod in [head_pod, *pods] for pid in pod_pids(pod)])
    jobsets.delete(name)

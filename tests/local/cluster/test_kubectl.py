"""The real ``kubectl`` binary against the local cluster: TLS, tables, discovery, OpenAPI and every verb.

Each test runs ``kubectl`` as a user would, with ``KUBECONFIG`` pointing at the kubeconfig the cluster
wrote, and asserts on what it prints. Skipped only where no ``kubectl`` is installed.
"""

from __future__ import annotations

import datetime
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from elastic_training.local.controlplane.pki import Authority
from elastic_training.local.kubeconfig import read_endpoint, write_kubeconfig
from elastic_training.local.upstream_cluster import UpstreamCluster
from tests.support.cluster_objects import jobset_body, pod
from tests.support.kubectl import KUBECTL, header, kubectl, rows
from tests.support.local_cluster import K8s
from tests.support.waiting import wait_for

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (no `kubectl` on PATH)")

GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"


@pytest.fixture(scope="module")
def kubeconfig(cluster: UpstreamCluster) -> Path:
    return cluster.kubeconfig_path


def _manifest(name: str, **changes: Any) -> str:
    body = jobset_body(name, replicas=1, suspend=True)
    body["metadata"].update(changes.pop("metadata", {}))
    body["spec"].update(changes)
    return yaml.safe_dump(body)


def _sleeping_jobset(name: str, command: list[str], **spec: Any) -> dict[str, Any]:
    body = jobset_body(name, suspend=False, **spec)
    container = body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    container["command"] = command
    return body


@pytest.fixture
def running_pod(k8s: K8s) -> Iterator[str]:
    name = f"kubectl-pod-{time.monotonic_ns() % 100000}"
    k8s.core.create_namespaced_pod("default", pod(name, labels={"suite": "kubectl"}, command=["sleep", "300"]))
    wait_for(lambda: k8s.core.read_namespaced_pod(name, "default").status.phase == "Running", timeout=60)
    yield name
    k8s.core.delete_namespaced_pod(name, "default", grace_period_seconds=0)


# -- TLS -----------------------------------------------------------------------------------------


def test_kubectl_verifies_the_cluster_ca_and_refuses_another(cluster: UpstreamCluster, kubeconfig: Path) -> None:
    assert "certificate-authority-data" in kubeconfig.read_text()
    version = kubectl(kubeconfig, "version", "-o", "yaml")
    assert "serverVersion:" in version.stdout
    token = read_endpoint(kubeconfig).token
    assert token
    other = Authority("another-cluster-ca", datetime.timedelta(days=1))
    foreign = write_kubeconfig(kubeconfig.parent / "foreign" / "kubeconfig", cluster.url, token, ca_pem=other.cert_pem)
    refused = kubectl(foreign, "get", "namespaces", check=False)
    assert refused.returncode != 0
    assert "certificate signed by unknown authority" in refused.stderr


# -- tables and discovery ------------------------------------------------------------------------


def test_get_pods_shows_the_columns_of_a_real_cluster(k8s: K8s, kubeconfig: Path, running_pod: str) -> None:
    listed = kubectl(kubeconfig, "get", "pods", "-l", "suite=kubectl").stdout
    assert header(listed) == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert rows(listed)[running_pod][1:4] == ["1/1", "Running", "0"]
    wide = kubectl(kubeconfig, "get", "po", running_pod, "-o", "wide").stdout
    assert header(wide) == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED NODE",
                            "READINESS GATES"]  # fmt: skip
    node = k8s.core.read_namespaced_pod(running_pod, "default").spec.node_name  # the scheduler's pick
    assert node.startswith("gke-local-cpu-np-")  # the one untainted pool of v5e-small
    assert rows(wide)[running_pod][5:] == ["127.0.0.1", node, "<none>", "<none>"]


def test_get_namespaces_jobs_events_and_jobsets(k8s: K8s, kubeconfig: Path) -> None:
    namespaces = kubectl(kubeconfig, "get", "ns").stdout
    assert header(namespaces) == ["NAME", "STATUS", "AGE"]
    assert rows(namespaces)["default"][1] == "Active"
    k8s.custom.create_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, _sleeping_jobset("tables", ["sleep", "300"])
    )
    try:
        wait_for(
            lambda: (
                k8s.core.list_namespaced_pod("default", label_selector="jobset.sigs.k8s.io/jobset-name=tables").items
            )
        )
        jobs = kubectl(kubeconfig, "get", "jobs").stdout
        assert header(jobs) == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
        assert rows(jobs)["tables-workers-0"][1:3] == ["Running", "0/1"]
        jobsets = kubectl(kubeconfig, "get", "jobsets").stdout
        assert header(jobsets) == ["NAME", "TERMINALSTATE", "RESTARTS", "COMPLETED", "SUSPENDED", "AGE"]
        assert "tables" in rows(jobsets)
        assert kubectl(kubeconfig, "get", "jobset", "tables", "-o", "jsonpath={.spec.suspend}").stdout == "false"
        events = kubectl(kubeconfig, "get", "ev").stdout
        assert header(events) == ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
        assert "job/tables-workers-0" in events
        everything = kubectl(kubeconfig, "get", "all").stdout
        assert "job.batch/tables-workers-0" in everything
        assert "pod/tables-workers-0-" in everything
    finally:
        kubectl(kubeconfig, "delete", "jobset", "tables", "--wait=false")


def test_api_resources_lists_upstream_short_names_and_categories(kubeconfig: Path) -> None:
    listed = kubectl(kubeconfig, "api-resources", "-o", "wide").stdout
    table = rows(listed)
    assert table["namespaces"][1] == "ns"
    assert table["pods"][1] == "po"
    assert table["events"][1] == "ev"
    assert table["pods"][-1] == "all"
    assert table["jobs"][-1] == "all"
    assert table["jobsets"][1] == "jobset.x-k8s.io/v1alpha2"  # no short name: upstream's CRD has none


# -- OpenAPI: apply validates, explain answers ---------------------------------------------------


def test_apply_creates_then_a_reapply_of_the_same_manifest_is_refused_by_jobsets_webhook(
    k8s: K8s, kubeconfig: Path
) -> None:
    """Client-side apply's JSON merge patch of a custom resource replaces ``replicatedJobs`` whole (no strategic
    merge for CRDs); JobSet v0.11.1's webhook compares it with the stored, defaulted list and calls it a change of
    an immutable field. Changing a JobSet goes through create/delete (the operator's way) or server-side apply."""
    first = _manifest("applied")
    assert kubectl(kubeconfig, "apply", "-f", "-", stdin=first).stdout.strip() == (
        "jobset.jobset.x-k8s.io/applied created"
    )
    again = kubectl(kubeconfig, "apply", "-f", "-", stdin=first, check=False)
    assert again.returncode != 0
    assert 'admission webhook "vjobset.kb.io" denied the request' in again.stderr
    assert "field is immutable" in again.stderr
    stored = k8s.custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "applied")
    assert stored["spec"]["suspend"] is True
    kubectl(kubeconfig, "delete", "jobset", "applied")


def test_apply_rejects_an_unknown_field_as_the_server_validates_it(kubeconfig: Path) -> None:
    misspelt = _manifest("misspelt", failurePolicy={"maxRestart": 3})
    refused = kubectl(kubeconfig, "apply", "-f", "-", stdin=misspelt, check=False)
    assert refused.returncode != 0
    assert 'strict decoding error: unknown field "spec.failurePolicy.maxRestart"' in refused.stderr
    ignored = kubectl(kubeconfig, "apply", "--validate=false", "-f", "-", stdin=misspelt, check=False)
    assert ignored.stdout.strip() == "jobset.jobset.x-k8s.io/misspelt created", ignored.stderr
    kubectl(kubeconfig, "delete", "jobset", "misspelt")


def test_explain_jobset_failure_policy_says_what_upstream_says(kubeconfig: Path) -> None:
    explained = kubectl(kubeconfig, "explain", "jobset.spec.failurePolicy").stdout
    assert "KIND:       JobSet" in explained and "VERSION:    v1alpha2" in explained
    assert "FIELD: failurePolicy <Object>" in explained
    assert "The JobSet is always declared failed if any job in the set" in explained
    for field in ("maxRestarts\t<integer>", "restartStrategy\t<string>", "rules\t<[]Object>"):
        assert field in explained
    action = kubectl(kubeconfig, "explain", "jobset.spec.failurePolicy.rules.action").stdout
    enum = "ENUM:\n    FailJobSet\n    RestartJobSet\n    RestartJobSetAndIgnoreMaxRestarts\n"  # JobSet v0.11.1's CRD
    assert "FIELD: action <string>\n" + enum in action
    recursive = kubectl(kubeconfig, "explain", "jobset.spec", "--recursive").stdout
    assert "onJobFailureMessagePatterns\t<[]string>" in recursive
    assert "FIELD: metadata <ObjectMeta>" in kubectl(kubeconfig, "explain", "pods.metadata").stdout


# -- verbs ---------------------------------------------------------------------------------------


def test_describe_jobset_and_pod_show_their_events(k8s: K8s, kubeconfig: Path, running_pod: str) -> None:
    kubectl(kubeconfig, "apply", "-f", "-", stdin=_manifest("described"))
    try:

        def described_with_events() -> str | None:
            out = kubectl(kubeconfig, "describe", "jobset", "described").stdout
            return out if "SuspendedJobs" in out else None

        described = wait_for(described_with_events)
        assert re.search(r"^Name:\s+described$", described, re.M)
        assert re.search(r"^Kind:\s+JobSet$", described, re.M)
        assert re.search(r"^  Suspend:\s+true$", described, re.M)
        assert re.search(r"^Events:\n  Type\s+Reason\s+Age\s+From\s+Message\n", described, re.M)
        assert re.search(r"Normal\s+SuspendedJobs\s+\S+\s+jobset\s+jobset is suspended", described)
        pod_description = kubectl(kubeconfig, "describe", "pod", running_pod).stdout
        assert re.search(rf"^Name:\s+{running_pod}$", pod_description, re.M)
        assert re.search(r"^Status:\s+Running$", pod_description, re.M)
        assert re.search(r"^    Ready:\s+True$", pod_description, re.M)
    finally:
        kubectl(kubeconfig, "delete", "jobset", "described")


def test_logs_follow_streams_until_the_container_ends(k8s: K8s, kubeconfig: Path) -> None:
    name = "kubectl-logs"
    command = ["sh", "-c", "for i in 1 2 3; do echo line-$i; sleep 1; done"]
    k8s.core.create_namespaced_pod("default", pod(name, command=command, restart_policy="Never"))
    try:
        wait_for(lambda: k8s.core.read_namespaced_pod(name, "default").status.phase != "Pending", timeout=60)
        followed = kubectl(kubeconfig, "logs", "-f", name)
        assert followed.stdout.splitlines() == ["line-1", "line-2", "line-3"]
    finally:
        k8s.core.delete_namespaced_pod(name, "default", grace_period_seconds=0)


def test_get_watch_prints_each_change_as_a_table_row(k8s: K8s, kubeconfig: Path, tmp_path: Path) -> None:
    name, gate = "kubectl-watched", tmp_path / "may-complete"
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "KUBECACHEDIR": str(kubeconfig.parent / "kube-cache")}
    assert KUBECTL is not None
    watcher = subprocess.Popen(
        [KUBECTL, "get", "pods", "-w", "-l", "suite=watched"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(watcher.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        # The pod completes only once the watch has shown it running: kubectl may open its watch (list, then
        # watch) after the pod exists, and a pod that had completed by then would show Completed first.
        command = ["sh", "-c", f"until [ -e {gate} ]; do sleep 0.05; done"]
        k8s.core.create_namespaced_pod(
            "default", pod(name, labels={"suite": "watched"}, command=command, restart_policy="Never")
        )
        wait_for(lambda: any(line.startswith(name) and " Running " in line for line in lines), timeout=60)
        gate.touch()
        wait_for(lambda: any("Completed" in line for line in lines), timeout=60)
    finally:
        watcher.kill()
        watcher.wait(timeout=10)
        k8s.core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
    # Whole rows only: the kill may cut kubectl's last row short, and readline returns the cut part at EOF
    # (ci58, at load 11: a row with fewer than three columns).
    rows = [line.split() for line in lines if line.startswith(name) and line.endswith("\n")]
    statuses = [row[2] for row in rows]
    assert statuses[0] in ("Pending", "ContainerCreating", "Running")
    assert "Running" in statuses and statuses[-1] == "Completed"
    assert all(row[1] in ("0/1", "1/1") for row in rows)


def test_wait_for_a_jobset_condition(k8s: K8s, kubeconfig: Path) -> None:
    k8s.custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, _sleeping_jobset("waited", ["true"]))
    try:
        waited = kubectl(kubeconfig, "wait", "--for=condition=Completed", "jobset/waited", "--timeout=90s")
        assert waited.stdout.strip() == "jobset.jobset.x-k8s.io/waited condition met"
        jobsets = kubectl(kubeconfig, "get", "jobset", "waited").stdout
        assert rows(jobsets)["waited"][1:5] == ["Completed", "0", "True", "false"]
    finally:
        kubectl(kubeconfig, "delete", "jobset", "waited")


def test_delete_foreground_waits_until_the_children_are_gone(k8s: K8s, kubeconfig: Path) -> None:
    k8s.custom.create_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, _sleeping_jobset("doomed", ["sleep", "300"])
    )
    selector = "jobset.sigs.k8s.io/jobset-name=doomed"
    wait_for(lambda: k8s.core.list_namespaced_pod("default", label_selector=selector).items, timeout=60)
    deleted = kubectl(kubeconfig, "delete", "jobset", "doomed", "--cascade=foreground", "--wait")
    assert deleted.stdout.strip() == 'jobset.jobset.x-k8s.io "doomed" deleted'
    # --wait returned only once the JobSet was gone; with Foreground that means its Jobs were gone first.
    names = [
        js["metadata"]["name"]
        for js in k8s.custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)["items"]
    ]
    assert "doomed" not in names
    assert k8s.batch.list_namespaced_job("default", label_selector=selector).items == []


def test_server_side_apply_owns_fields_removes_dropped_ones_and_reports_conflicts(k8s: K8s, kubeconfig: Path) -> None:
    labelled = _manifest("ssa", metadata={"labels": {"team": "ml"}})
    for _ in range(2):
        applied = kubectl(kubeconfig, "apply", "--server-side", "-f", "-", stdin=labelled)
        assert applied.stdout.strip() == "jobset.jobset.x-k8s.io/ssa serverside-applied"
    stored = k8s.custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "ssa")
    # kubectl's Apply entry, beside the JobSet controller's status writes
    (entry,) = [e for e in stored["metadata"]["managedFields"] if e["operation"] == "Apply"]
    assert entry["manager"] == "kubectl"
    assert entry["fieldsV1"]["f:metadata"]["f:labels"] == {"f:team": {}}
    # The same manager leaves the label out: the server removes it.
    kubectl(kubeconfig, "apply", "--server-side", "-f", "-", stdin=_manifest("ssa"))
    stored = k8s.custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "ssa")
    assert "labels" not in stored["metadata"]
    # Another manager applying a different value of a field kubectl owns conflicts, unless it forces.
    resumed = _manifest("ssa", suspend=False)
    refused = kubectl(
        kubeconfig, "apply", "--server-side", "--field-manager=other", "-f", "-", stdin=resumed, check=False
    )
    assert refused.returncode != 0
    assert 'Apply failed with 1 conflict: conflict with "kubectl": .spec.suspend' in refused.stderr
    kubectl(
        kubeconfig, "apply", "--server-side", "--field-manager=other", "--force-conflicts", "-f", "-", stdin=resumed
    )
    stored = k8s.custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "ssa")
    assert stored["spec"]["suspend"] is False
    owners = {e["manager"]: e["fieldsV1"] for e in stored["metadata"]["managedFields"]}
    assert "f:suspend" in owners["other"]["f:spec"] and "f:suspend" not in owners["kubectl"]["f:spec"]
    kubectl(kubeconfig, "delete", "jobset", "ssa", "--cascade=foreground", "--wait")

"""Server-side Tables: content negotiation, upstream's printers as tables of cases, and over HTTP."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from elastic_training.local.cluster.resources import JOBS, JOBSETS, PODS, ApiError
from elastic_training.local.cluster.tables import TableRequest, human_duration, negotiate, to_table
from tests.support.cluster_objects import jobset_body, pod
from tests.support.local_cluster import K8s

NOW = datetime(2026, 1, 2, 12, 0, 0, tzinfo=UTC)
KUBECTL_ACCEPT = (
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-5, "<invalid>"),
        (-1, "0s"),
        (0, "0s"),
        (119, "119s"),
        (120, "2m"),
        (200, "3m20s"),
        (600, "10m"),
        (179 * 60, "179m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 5 * 60, "3h5m"),
        (8 * 3600, "8h"),
        (47 * 3600, "47h"),
        (50 * 3600, "2d2h"),
        (8 * 86400, "8d"),
        (2 * 365 * 86400 + 10 * 86400, "2y10d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_human_duration_is_apimachinerys(seconds: int, text: str) -> None:
    assert human_duration(seconds) == text


@pytest.mark.parametrize(
    ("accept", "include", "expected"),
    [
        (None, None, None),
        ("application/json", None, None),
        (KUBECTL_ACCEPT, None, TableRequest("v1", "Metadata")),
        ("application/json;as=Table;v=v1beta1;g=meta.k8s.io", "Object", TableRequest("v1beta1", "Object")),
        ("application/json;as=Table;v=v2;g=meta.k8s.io, application/json", None, None),
        ("application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json", None, None),
    ],
)
def test_negotiate(accept: str | None, include: str | None, expected: TableRequest | None) -> None:
    assert negotiate(accept, include) == expected


def test_negotiate_rejects_an_unknown_include_object() -> None:
    with pytest.raises(ApiError) as caught:
        negotiate(KUBECTL_ACCEPT, "Everything")
    assert caught.value.code == 400


def _pod(phase: str, statuses: list[dict[str, Any]], **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "creationTimestamp": "2026-01-02T11:55:00Z", **meta},
        "spec": {"containers": [{"name": f"c{i}"} for i in range(len(statuses) or 1)]},
        "status": {"phase": phase, "containerStatuses": statuses},
    }


def _cells(rtype: Any, obj: dict[str, Any]) -> list[Any]:
    table = to_table(rtype, [obj], TableRequest("v1", "None"), now=NOW)
    assert "object" not in table["rows"][0]
    cells: list[Any] = table["rows"][0]["cells"]
    return cells


RUNNING = {"ready": True, "restartCount": 0, "state": {"running": {"startedAt": "2026-01-02T11:55:01Z"}}}


@pytest.mark.parametrize(
    ("pod_obj", "ready", "status", "restarts"),
    [
        (_pod("Pending", []), "0/1", "Pending", "0"),
        (_pod("Running", [RUNNING]), "1/1", "Running", "0"),
        (
            _pod(
                "Running",
                [
                    {
                        "ready": False,
                        "restartCount": 2,
                        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                        "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2026-01-02T11:59:00Z"}},
                    }
                ],
            ),
            "0/1",
            "CrashLoopBackOff",
            "2 (60s ago)",
        ),
        (
            _pod("Succeeded", [{"ready": False, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]),
            "0/1",
            "Completed",
            "0",
        ),
        (_pod("Failed", [{"ready": False, "state": {"terminated": {"exitCode": 3}}}]), "0/1", "ExitCode:3", "0"),
        (_pod("Failed", [{"ready": False, "state": {"terminated": {"signal": 9}}}]), "0/1", "Signal:9", "0"),
        (_pod("Running", [RUNNING], deletionTimestamp="2026-01-02T11:59:59Z"), "1/1", "Terminating", "0"),
    ],
)
def test_pod_columns_follow_print_pod(pod_obj: dict[str, Any], ready: str, status: str, restarts: str) -> None:
    assert _cells(PODS, pod_obj)[:5] == ["p", ready, status, restarts, "5m"]


def test_job_columns_follow_print_job() -> None:
    job = {
        "metadata": {"name": "j", "creationTimestamp": "2026-01-02T11:00:00Z"},
        "spec": {"completions": 4, "template": {"spec": {"containers": [{"name": "main", "image": "local"}]}}},
        "status": {
            "succeeded": 4,
            "startTime": "2026-01-02T11:00:00Z",
            "completionTime": "2026-01-02T11:02:30Z",
            "conditions": [{"type": "Complete", "status": "True"}],
        },
    }
    assert _cells(JOBS, job) == ["j", "Complete", "4/4", "2m30s", "60m", "main", "local", "<none>"]
    job["spec"] = {"parallelism": 3}
    job["status"] = {"succeeded": 1, "startTime": "2026-01-02T11:58:00Z"}
    assert _cells(JOBS, job)[1:4] == ["Running", "1/1 of 3", "2m"]


def test_jobset_columns_are_the_crds_printer_columns() -> None:
    jobset = {
        "metadata": {"name": "js", "creationTimestamp": "2026-01-02T11:59:30Z"},
        "spec": {"suspend": False},
        "status": {
            "restarts": 2,
            "terminalState": "Completed",
            "conditions": [{"type": "Completed", "status": "True"}],
        },
    }
    table = to_table(JOBSETS, [jobset], TableRequest("v1", "Metadata"), now=NOW)
    names = [(c["name"], c["type"]) for c in table["columnDefinitions"]]
    assert names == [
        ("Name", "string"),
        ("TerminalState", "string"),
        ("Restarts", "string"),
        ("Completed", "string"),
        ("Suspended", "string"),
        ("Age", "date"),
    ]
    assert table["rows"][0]["cells"] == ["js", "Completed", "2", "True", "false", "30s"]
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    fresh = {"metadata": {"name": "new", "creationTimestamp": "2026-01-02T11:59:30Z"}, "spec": {}}
    assert _cells(JOBSETS, fresh) == ["new", None, None, None, None, "30s"]


def test_tables_over_http_for_list_get_and_watch(k8s: K8s) -> None:
    k8s.core.create_namespaced_pod("default", pod("table-pod", labels={"suite": "tables"}))
    k8s.custom.create_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", "default", "jobsets", jobset_body("table-js")
    )
    headers = {"Accept": KUBECTL_ACCEPT}
    api = k8s.api_client

    def call(path: str, **query: str) -> dict[str, Any]:
        response = api.call_api(
            path,
            "GET",
            header_params=headers,
            query_params=list(query.items()),
            auth_settings=["BearerToken"],
            _preload_content=False,
        )
        return dict(json.loads(response.data))

    listed = call("/api/v1/namespaces/default/pods", labelSelector="suite=tables")
    assert (listed["kind"], listed["apiVersion"]) == ("Table", "meta.k8s.io/v1")
    assert [c["name"] for c in listed["columnDefinitions"] if c["priority"] == 0] == [
        "Name",
        "Ready",
        "Status",
        "Restarts",
        "Age",
    ]
    assert [c["name"] for c in listed["columnDefinitions"] if c["priority"] == 1] == [
        "IP",
        "Node",
        "Nominated Node",
        "Readiness Gates",
    ]
    assert listed["rows"][0]["cells"][0] == "table-pod"
    assert listed["metadata"]["resourceVersion"]
    one = call("/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets/table-js", includeObject="Object")
    cells = one["rows"][0]["cells"]
    assert (cells[0], cells[1], cells[4]) == ("table-js", None, "true")  # suspended: no terminal state
    assert one["rows"][0]["object"]["kind"] == "JobSet"
    response = api.call_api(
        "/api/v1/namespaces/default/pods",
        "GET",
        header_params=headers,
        auth_settings=["BearerToken"],
        query_params=[("watch", "true"), ("labelSelector", "suite=tables"), ("timeoutSeconds", "1")],
        _preload_content=False,
    )
    events = [json.loads(line) for line in response.data.splitlines() if line.strip()]
    assert events[0]["type"] == "ADDED"
    assert events[0]["object"]["kind"] == "Table"
    assert events[0]["object"]["rows"][0]["cells"][0] == "table-pod"
    plain = k8s.core.list_namespaced_pod("default", label_selector="suite=tables")  # JSON when not asked
    assert plain.items[0].metadata.name == "table-pod"

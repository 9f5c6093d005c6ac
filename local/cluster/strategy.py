"""Create strategies: what the API server does to a new object before it is stored.

Upstream every create, whether it comes from ``kubectl`` or from a controller in
kube-controller-manager, is one API request and goes through the same steps: defaulting (the
decoder's ``SetDefaults_*``), ``rest.BeforeCreate`` (the type's ``PrepareForCreate``, which resets
``status``; the system fields) and the type's ``Validate``. The local controllers run in-process
and create through :meth:`Store.create`, which calls this module, so a pod made by the Job
controller reads exactly like one made through the API (``status.phase: Pending`` at once).

Defaults are the ones the local cluster and its clients read, not the whole upstream set:
pods (``restartPolicy``, ``terminationGracePeriodSeconds``, ``dnsPolicy``, ``schedulerName``),
Jobs (``completions``/``parallelism``, ``backoffLimit``, ``completionMode``, ``suspend``) and
nodes (the status a kubelet registers is kept), pod containers' requests from their limits and
``hostPort`` for a ``hostNetwork`` pod's ports, pod ``priority`` 0 (the Priority admission plugin),
namespaces (the ``kubernetes`` finalizer the namespace controller removes). The JobSet webhook's
defaults are not applied.
"""

from __future__ import annotations

from typing import Any

from elastic_training.local.cluster import kueue_api
from elastic_training.local.cluster.resources import JOBS, NAMESPACES, NODES, PODS, ResourceType
from elastic_training.operators.constants import LABEL_CONTROLLER_UID, LABEL_JOB_NAME

Obj = dict[str, Any]

NAMESPACE_FINALIZER = "kubernetes"  # the namespace controller's (spec.finalizers, not metadata)
DEFAULT_TERMINATION_GRACE_SECONDS = 30
DEFAULT_BACKOFF_LIMIT = 6


def prepare_for_create(rtype: ResourceType, obj: Obj) -> None:
    """Defaults and ``PrepareForCreate``: fill what the API server fills, reset ``status``."""
    spec = obj.get("spec")
    if rtype == PODS:
        if isinstance(spec, dict):
            _default_pod_spec(spec)
        # pkg/registry/core/pod/strategy.go PrepareForCreate: Status{Phase: Pending, QOSClass: ...}.
        obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
    elif rtype == JOBS:
        if isinstance(spec, dict):
            _default_job_spec(spec)
        obj["status"] = {}
    elif rtype == NAMESPACES:
        # pkg/registry/core/namespace/strategy.go: phase Active and the "kubernetes" finalizer.
        ns_spec = obj["spec"] if isinstance(spec, dict) else obj.setdefault("spec", {})
        finalizers = list(ns_spec.get("finalizers") or [])
        if NAMESPACE_FINALIZER not in finalizers:
            finalizers.append(NAMESPACE_FINALIZER)
        ns_spec["finalizers"] = finalizers
        obj["status"] = {"phase": "Active"}
    elif rtype == NODES:
        pass  # pkg/registry/core/node/strategy.go keeps the status a kubelet registers with
    elif rtype.has_status:
        kueue_api.apply_defaults(rtype, obj)
        obj.pop("status", None)
    else:
        kueue_api.apply_defaults(rtype, obj)  # a CRD without a status subresource (ProvisioningRequestConfig)


def after_system_fields(rtype: ResourceType, obj: Obj) -> None:
    """What needs the uid: a Job's generated selector and pod-template labels.

    pkg/registry/batch/job/strategy.go generates them in ``Validate`` (after ``BeforeCreate`` set
    the uid) unless ``manualSelector`` is true.
    """
    if rtype != JOBS:
        return
    spec = obj.get("spec")
    if not isinstance(spec, dict) or spec.get("manualSelector"):
        return
    meta = obj["metadata"]
    uid, name = str(meta["uid"]), str(meta["name"])
    template = spec.get("template")
    if not isinstance(template, dict):
        return
    template_meta = template.get("metadata")
    if not isinstance(template_meta, dict):
        template_meta = template["metadata"] = {}
    existing = template_meta.get("labels")
    labels: Obj = existing if isinstance(existing, dict) else {}
    template_meta["labels"] = {
        **labels,
        LABEL_CONTROLLER_UID: uid,
        LABEL_JOB_NAME: name,
        "controller-uid": uid,
        "job-name": name,
    }
    spec.setdefault("selector", {"matchLabels": {LABEL_CONTROLLER_UID: uid}})


def _default_pod_spec(spec: Obj) -> None:
    # pkg/apis/core/v1/defaults.go SetDefaults_PodSpec.
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", DEFAULT_TERMINATION_GRACE_SECONDS)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    # The Priority admission plugin: no priorityClassName and no global default class → priority 0.
    if not spec.get("priorityClassName"):
        spec.setdefault("priority", 0)
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or []:
            if isinstance(container, dict):
                _default_container(container, host_network=bool(spec.get("hostNetwork")))


def _default_container(container: Obj, *, host_network: bool) -> None:
    # pkg/apis/core/v1/defaults.go: SetDefaults_ResourceList/SetDefaults_Pod copy a limit into a missing
    # request; SetDefaults_Pod gives a hostNetwork pod's ports hostPort = containerPort.
    resources = container.get("resources")
    if isinstance(resources, dict) and isinstance(resources.get("limits"), dict) and resources["limits"]:
        requests = resources.get("requests")
        resources["requests"] = {**resources["limits"], **(requests if isinstance(requests, dict) else {})}
    if host_network:
        for port in container.get("ports") or []:
            if isinstance(port, dict) and port.get("containerPort") and not port.get("hostPort"):
                port["hostPort"] = port["containerPort"]


def _default_job_spec(spec: Obj) -> None:
    # pkg/apis/batch/v1/defaults.go SetDefaults_Job.
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", DEFAULT_BACKOFF_LIMIT)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    template = spec.get("template")
    if isinstance(template, dict) and isinstance(template.get("spec"), dict):
        _default_pod_spec(template["spec"])

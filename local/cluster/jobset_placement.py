"""JobSet's exclusive placement: its pod webhook, run as an admission step on every pod create.

Follows kubernetes-sigs/jobset ``pkg/webhooks/pod_webhook.go`` and ``pkg/util/placement/placement.go``
(commit 08dfbdfd682714a9ab929633eca8dc95315187e7; older releases split it into
``pod_mutating_webhook.go`` and ``pod_admission_webhook.go``). A pod of a JobSet whose annotations
carry ``alpha.jobset.sigs.k8s.io/exclusive-topology: <topology key>`` (copied there from the JobSet's
or the replicated job template's annotations by the JobSet controller, ``labelAndAnnotateObject``):

- the **leader** (completion index 0) gets a required pod affinity to pods of its own Job
  (``job-key`` In [own]) and a required pod anti-affinity to pods of other Jobs at the same priority
  (``job-key`` Exists, NotIn [own], ``jobset.sigs.k8s.io/priority`` In [own]), both over the
  topology key and every namespace: the scheduler then puts it in a domain (node pool) no other
  Job's pods use, and keeps other Jobs' leaders out of its domain;
- a **follower** gets ``nodeSelector[<topology key>] = <the leader's node's label>`` once the
  leader is scheduled; until then its creation is refused with the webhook's error ("leader pod not
  yet scheduled, not creating follower pod. this is an expected, transient error") and the Job
  controller tries again when the leader's pod changes.

So each child Job lands wholly in one node pool and no two Jobs share one. The pod label
``jobset.sigs.k8s.io/priority`` is the pod's ``spec.priority`` (the Priority admission plugin,
:mod:`local.cluster.pod_priority`, sets it on every pod before this webhook runs: the class's value, 0 without a
class). It must: a pod left without ``spec.priority`` gets no label, its leader's anti-affinity term then asks for
``priority In [""]``, selects no pod, and two Jobs' leaders can share a pool (upstream added the label for
kubernetes-sigs/jobset #1057, and relies on the API server always resolving ``spec.priority``).
Not modelled: the ``alpha.jobset.sigs.k8s.io/node-selector`` strategy (pods with
it are left alone, as upstream's webhook does, but no node labels/taints are managed) and the pod
controller (``pkg/controllers/pod_controller.go``) that deletes followers whose node selector names
another domain than their leader's (with the node selector set here at creation, that happens only
when a leader is replaced while its followers are still unscheduled).
"""

from __future__ import annotations

from typing import Any

from elastic_training.local.cluster.resources import NODES, PODS, ApiError, ResourceType
from elastic_training.local.cluster.store import Obj, Store
from elastic_training.operators.constants import (
    ANNOTATION_EXCLUSIVE_TOPOLOGY,
    ANNOTATION_JOB_COMPLETION_INDEX,
    JOBSET_PREFIX,
    LABEL_JOB_INDEX,
    LABEL_JOB_KEY,
    LABEL_JOBSET_NAME,
    LABEL_REPLICATED_JOB_NAME,
)

ANNOTATION_NODE_SELECTOR_STRATEGY = "alpha.jobset.sigs.k8s.io/node-selector"
LABEL_PRIORITY = f"{JOBSET_PREFIX}/priority"
WEBHOOK_NAME = "vpod.kb.io"
MUTATING_WEBHOOK_NAME = "mpod.kb.io"


def denied(webhook: str, message: str) -> ApiError:
    """The API server's answer when an admission webhook refuses a request."""
    return ApiError(403, "Forbidden", f'admission webhook "{webhook}" denied the request: {message}')


class JobSetPodWebhook:
    """The JobSet pod webhook (defaulting, then validation) as a store admission step."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def admit(self, rtype: ResourceType, pod: Obj) -> None:
        """Mutate and validate a pod being created; raises the webhook's denial."""
        if rtype != PODS:
            return
        annotations: dict[str, Any] = pod["metadata"].get("annotations") or {}
        if LABEL_JOBSET_NAME not in annotations or ANNOTATION_NODE_SELECTOR_STRATEGY in annotations:
            return
        spec = pod.setdefault("spec", {})
        labels = pod["metadata"].setdefault("labels", {})
        if spec.get("priority") is not None:
            labels[LABEL_PRIORITY] = str(spec["priority"])
        topology_key = annotations.get(ANNOTATION_EXCLUSIVE_TOPOLOGY)
        if topology_key is None:
            return
        if is_leader(pod):
            set_exclusive_affinities(pod, str(topology_key))
            return
        leader = self._leader_for(pod)  # raises when there is not exactly one live leader
        if leader.get("spec", {}).get("nodeName"):
            node = self._store.find(NODES, "", str(leader["spec"]["nodeName"]))
            value = ((node or {}).get("metadata", {}).get("labels") or {}).get(topology_key)
            if value is None:
                raise denied(MUTATING_WEBHOOK_NAME, f"node does not have topology label: {topology_key}")
            spec.setdefault("nodeSelector", {})[topology_key] = value
        selector = spec.get("nodeSelector") or {}
        if not selector:
            raise denied(WEBHOOK_NAME, "follower pod node selector not set")
        if topology_key not in selector:
            raise denied(
                WEBHOOK_NAME,
                f"follower pod node selector for topology domain not found. missing selector: {topology_key}",
            )
        if not leader.get("spec", {}).get("nodeName"):
            raise denied(
                WEBHOOK_NAME,
                "leader pod not yet scheduled, not creating follower pod. this is an expected, transient error",
            )

    def _leader_for(self, pod: Obj) -> Obj:
        labels = pod["metadata"].get("labels") or {}
        wanted = {key: labels.get(key) for key in (LABEL_JOBSET_NAME, LABEL_REPLICATED_JOB_NAME, LABEL_JOB_INDEX)}
        leader_name = f"{wanted[LABEL_JOBSET_NAME]}-{wanted[LABEL_REPLICATED_JOB_NAME]}-{wanted[LABEL_JOB_INDEX]}-0"

        def live_leader(candidate: Obj) -> bool:
            meta = candidate["metadata"]
            candidate_labels = meta.get("labels") or {}
            return (
                all(candidate_labels.get(k) == v for k, v in wanted.items())
                and is_leader(candidate)
                and not meta.get("deletionTimestamp")
                and candidate.get("status", {}).get("phase") not in ("Succeeded", "Failed")
            )

        leaders, _ = self._store.view(PODS, pod["metadata"]["namespace"], live_leader)
        if len(leaders) != 1:
            raise denied(
                WEBHOOK_NAME,
                f"expected 1 leader pod ({leader_name}), but got {len(leaders)}. this is an expected, transient error",
            )
        owner = _controller_uid(leaders[0])
        if owner != _controller_uid(pod):
            raise denied(
                WEBHOOK_NAME, f"follower pod owner UID ({_controller_uid(pod)}) != leader pod owner UID ({owner})"
            )
        return leaders[0]


def is_leader(pod: Obj) -> bool:
    """``placement.IsLeaderPod``: completion index 0."""
    return (pod["metadata"].get("annotations") or {}).get(ANNOTATION_JOB_COMPLETION_INDEX) == "0"


def _controller_uid(pod: Obj) -> str:
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid", ""))
    return ""


def set_exclusive_affinities(pod: Obj, topology_key: str) -> None:
    """``setExclusiveAffinities``: the leader's required pod affinity and anti-affinity terms."""
    labels = pod["metadata"].get("labels") or {}
    job_key = str(labels.get(LABEL_JOB_KEY, ""))
    affinity = pod["spec"].setdefault("affinity", {})
    pod_affinity = affinity.setdefault("podAffinity", {})
    anti_affinity = affinity.setdefault("podAntiAffinity", {})
    pod_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", []).append(
        {
            "labelSelector": {"matchExpressions": [{"key": LABEL_JOB_KEY, "operator": "In", "values": [job_key]}]},
            "topologyKey": topology_key,
            "namespaceSelector": {},
        }
    )
    anti_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", []).append(
        {
            "labelSelector": {
                "matchExpressions": [
                    {"key": LABEL_JOB_KEY, "operator": "Exists"},
                    {"key": LABEL_JOB_KEY, "operator": "NotIn", "values": [job_key]},
                    {"key": LABEL_PRIORITY, "operator": "In", "values": [str(labels.get(LABEL_PRIORITY, ""))]},
                ]
            },
            "topologyKey": topology_key,
            "namespaceSelector": {},
        }
    )

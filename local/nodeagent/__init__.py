"""The node agent: the part of the local cluster that plays each node's kubelet (local/README.md: what else is ours).

No kubelet or container runtime can run here, so one Python process registers the cluster description's nodes with
the real kube-apiserver, keeps their leases, runs the pods bound to them as local processes through the image
catalogue, writes their status and serves their logs through the kubelet API. See :class:`NodeAgent`.
"""

from elastic_training.local.nodeagent.agent import NodeAgent, NodeAgentError

__all__ = ["NodeAgent", "NodeAgentError"]

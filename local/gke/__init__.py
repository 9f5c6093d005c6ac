"""GKE's closed parts, as small stand-ins against the real kube-apiserver.

GKE runs pieces no one can run outside Google: the cluster autoscaler's node pool provisioning and its answer to
queued-provisioning ProvisioningRequests. Everything Kubernetes or Kueue does with what they produce (scheduling on
the new nodes, Kueue reading a request's conditions, pod GC of a deleted node's pods) is the upstream components'.

- :mod:`.provisioning_requests`: the ``queued-provisioning.gke.io`` class's answer to ProvisioningRequests;
- :mod:`.on_demand`: node pools that scale up when an unschedulable pod needs them;
- :mod:`.node_pools`: which pools wait for demand, and their nodes registered or removed through the node agent;
- :mod:`.stand_in`: the parts together on one thread, as :class:`UpstreamCluster` starts them.
"""

from elastic_training.local.gke.provisioning_requests import Rule
from elastic_training.local.gke.stand_in import GkeStandIn, ProvisioningError

__all__ = ["GkeStandIn", "ProvisioningError", "Rule"]

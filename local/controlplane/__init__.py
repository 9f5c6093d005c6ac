"""The upstream Kubernetes control plane on one machine, and what runs beside it.

Upstream, built from the Go module proxy at pinned releases (``local/upstream/`` holds the wrapper modules):
etcd, kube-apiserver, kube-controller-manager, kube-scheduler, the JobSet controller and the Kueue controller
manager. Ours, because nothing upstream can run here: the certificates and configuration they start with
(``pki``, ``configs``), the rendering of their released manifests onto loopback (``manifests``), and the
process supervision (``processes``). The node agent, GKE's closed parts and the faults live beside this package.
"""

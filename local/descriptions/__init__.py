"""Cluster descriptions: node pools, Kueue objects and Kueue's configuration, as YAML (docs/local-cluster.md)."""

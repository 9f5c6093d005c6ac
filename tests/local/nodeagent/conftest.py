"""Fixtures for the node agent's tests: one real control plane and one node agent per test module."""

from __future__ import annotations

from tests.support.node_agent import cluster

__all__ = ["cluster"]

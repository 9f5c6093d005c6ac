"""Fixtures for the workload tests: a small model's keys, a run trained once per session, the local cluster."""

from __future__ import annotations

import pytest

# The local cluster and its clients, for the tests that run the operator's JobSet (test_pathways_session.py).
from tests.support.local_cluster import cluster, k8s

__all__ = ["cluster", "k8s"]


@pytest.fixture
def small_model() -> list[str]:
    """Model keys that keep a test run to a few milliseconds per step."""
    return ["base_emb_dim=32", "base_num_decoder_layers=1", "vocab_size=32", "max_target_length=16"]


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[str]]:
    """A small run trained in this process (one slice): checkpoints 0, 10, 20 and 29. Returns (base, keys)."""
    from elastic_training.local.workloads.config import TrainConfig, parse_args
    from elastic_training.local.workloads.slices import StaticSliceHealth
    from elastic_training.local.workloads.trainer import Trainer

    base = str(tmp_path_factory.mktemp("trained"))
    keys = [f"base_output_directory={base}", "run_name=trained", "base_emb_dim=32", "vocab_size=32"]
    config = parse_args(TrainConfig, [*keys, "steps=30", "checkpoint_period=10"])
    assert Trainer(config, StaticSliceHealth(1)).run() == 0
    return base, keys

"""Airflow operators for elastic MaxText JobSets on Kubernetes.

Public names are imported lazily so that the pure parts of the library (spec, policy,
checkpoint validation, the operators' option groups) can be used without importing Airflow.
"""

from __future__ import annotations

import importlib
from typing import Any

_OPTIONS = "elastic_training.operators.options"
_PUBLIC = {
    "Budgets": _OPTIONS,
    "Capacity": _OPTIONS,
    "ElasticTrainingDeprecationWarning": _OPTIONS,
    "History": _OPTIONS,
    "Scale": _OPTIONS,
    "Training": _OPTIONS,
    "CheckpointValidationOperator": "elastic_training.operators.checkpoint_operator",
    "ElasticJobSetOperator": "elastic_training.operators.elastic_operator",
    "JobSetOperator": "elastic_training.operators.jobset_operator",
    "JobSetTrigger": "elastic_training.operators.triggers",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'operators' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)

"""Airflow operators for elastic MaxText JobSets on Kubernetes.

Public names are imported lazily so that the pure parts of the library (spec, policy,
checkpoint validation, the operators' option groups) can be used without importing Airflow.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the types a DAG author's checker sees (explicit re-exports); at run time, the lazy imports below
    from elastic_training.operators.checkpoint_operator import (
        CheckpointValidationOperator as CheckpointValidationOperator,
    )
    from elastic_training.operators.elastic_operator import ElasticJobSetOperator as ElasticJobSetOperator
    from elastic_training.operators.jobset_operator import JobSetOperator as JobSetOperator
    from elastic_training.operators.options import Budgets as Budgets
    from elastic_training.operators.options import Capacity as Capacity
    from elastic_training.operators.options import (
        ElasticTrainingDeprecationWarning as ElasticTrainingDeprecationWarning,
    )
    from elastic_training.operators.options import History as History
    from elastic_training.operators.options import Scale as Scale
    from elastic_training.operators.options import Training as Training
    from elastic_training.operators.triggers import JobSetTrigger as JobSetTrigger

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

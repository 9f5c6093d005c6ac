"""elastic-training: Airflow operators for elastic MaxText JobSets, with checkpoint validation between stages.

The one import namespace of the distribution: `elastic_training.operators` (the library),
`elastic_training.plugin` (the Airflow plugin), `elastic_training.cli` (the ``elastic-training`` command)
and `elastic_training.local` (the one-machine stand-ins for GKE and MaxText).
"""

from __future__ import annotations


def __getattr__(name: str) -> str:
    # `__version__` is read from the installed metadata on first use only: importing `importlib.metadata`
    # and scanning the distributions is ~40 ms, which every stand-in process of the local cluster (a
    # Pathways worker is one per TPU host) would otherwise pay to start.
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("elastic-training")
    except PackageNotFoundError:  # a source tree that is not installed
        found = "0.0.0"
    globals()["__version__"] = found
    return found

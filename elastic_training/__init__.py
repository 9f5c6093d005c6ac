"""elastic-training: Airflow operators for elastic MaxText JobSets, with checkpoint validation between stages.

The one import namespace of the distribution: `elastic_training.operators` (the library),
`elastic_training.plugin` (the Airflow plugin), `elastic_training.cli` (the ``elastic-training`` command)
and `elastic_training.local` (the one-machine stand-ins for GKE and MaxText).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("elastic-training")
except PackageNotFoundError:  # a source tree that is not installed
    __version__ = "0.0.0"

"""Orbax checkpoint discovery and validation on local disk and ``gs://``. No Airflow import here."""

from __future__ import annotations

from elastic_training.operators.checkpoints.discovery import QUARANTINE_DIR, Discovery, Ignored, IgnoredReason, discover
from elastic_training.operators.checkpoints.libraries import MissingLibraryError
from elastic_training.operators.checkpoints.moving import MoveError
from elastic_training.operators.checkpoints.problems import Finding, Problem
from elastic_training.operators.checkpoints.quarantine import quarantine_step
from elastic_training.operators.checkpoints.report import CheckpointReport, DeepOptions, validate_checkpoints
from elastic_training.operators.checkpoints.storage import (
    CredentialsError,
    GCSStorage,
    LocalStorage,
    Storage,
    StorageError,
    storage_for,
)
from elastic_training.operators.checkpoints.validation import StepVerdict, ValidationOptions, validate_step

__all__ = [
    "QUARANTINE_DIR",
    "CheckpointReport",
    "CredentialsError",
    "DeepOptions",
    "Discovery",
    "Finding",
    "GCSStorage",
    "Ignored",
    "IgnoredReason",
    "LocalStorage",
    "MissingLibraryError",
    "MoveError",
    "Problem",
    "StepVerdict",
    "Storage",
    "StorageError",
    "ValidationOptions",
    "discover",
    "quarantine_step",
    "storage_for",
    "validate_checkpoints",
    "validate_step",
]

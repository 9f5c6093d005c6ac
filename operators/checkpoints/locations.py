"""Where checkpoints live: ``gs://`` URIs and the storage error every reader and mover raises. No I/O.

Shared by `operators.checkpoints.storage` (reading) and `operators.checkpoints.moving` (moving a step aside),
so that neither imports the other's module for these: storage uses moving, never the reverse.
"""

from __future__ import annotations

GCS_SCHEME = "gs://"


class StorageError(Exception):
    """Storage could not be reached or answered with an error (after retries)."""


def is_gcs(path: str) -> bool:
    """Whether `path` is a ``gs://`` URI."""
    return path.startswith(GCS_SCHEME)


def split_gcs(uri: str) -> tuple[str, str]:
    """``gs://bucket/a/b`` -> ``("bucket", "a/b")``; `ValueError` without a bucket."""
    if not is_gcs(uri):
        raise ValueError(f"not a gs:// URI: {uri!r}")
    bucket, _, key = uri[len(GCS_SCHEME) :].partition("/")
    if not bucket:
        raise ValueError(f"gs:// URI without a bucket: {uri!r}")
    return bucket, key.strip("/")

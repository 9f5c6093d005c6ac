"""A small storage interface for checkpoint validation: local disk and ``gs://``.

Paths are plain strings: filesystem paths for `LocalStorage`, ``gs://bucket/key`` URIs for
`GCSStorage`. Every read is bounded and every listing is capped, so hostile trees (huge files,
FIFOs, symlink loops, millions of entries) give an answer instead of a hang.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from google.api_core.retry import Retry
    from google.cloud.storage import Client

_T = TypeVar("_T")
GCS_SCHEME = "gs://"
DEFAULT_LIST_LIMIT = 1_000_000


class EntryKind(StrEnum):
    """What a listed name is. `OTHER` covers FIFOs, sockets, devices and broken or looping links."""

    FILE = "file"
    DIR = "dir"
    OTHER = "other"


@dataclass(frozen=True)
class Entry:
    """One listed name, relative to the listed directory (``/``-separated for nested names)."""

    name: str
    kind: EntryKind
    size: int = 0


@dataclass(frozen=True)
class Listing:
    """Files under a directory (recursive); `truncated` when the cap was reached."""

    entries: tuple[Entry, ...]
    truncated: bool = False


class StorageError(Exception):
    """Storage could not be reached or answered with an error (after retries)."""


class CredentialsError(StorageError):
    """No usable Google Cloud credentials: an environment problem, not an invalid checkpoint.

    The message says what to set and never carries a credentials path or file content.
    """


_ADC_HELP = (
    "set GOOGLE_APPLICATION_CREDENTIALS to a service account key file, run "
    "`gcloud auth application-default login`, or run with a service account attached "
    "(STORAGE_EMULATOR_HOST for an emulator)"
)


def credentials_error(error: BaseException) -> CredentialsError:
    """A `CredentialsError` for a google-auth failure, naming what to set (without the credentials' path)."""
    from google.auth import exceptions

    if os.environ.get("GOOGLE_APPLICATION_CREDENTIALS") and isinstance(error, exceptions.DefaultCredentialsError):
        what = "GOOGLE_APPLICATION_CREDENTIALS is set, but its file is missing or not a credentials file"
    elif isinstance(error, exceptions.DefaultCredentialsError):
        what = "no Google Cloud credentials were found (Application Default Credentials)"
    elif isinstance(error, exceptions.RefreshError):
        what = "the Google Cloud credentials were refused (expired, revoked or malformed)"
    elif isinstance(error, exceptions.TransportError):
        what = "the Google token service could not be reached to use the credentials"
    else:
        what = f"the Google Cloud credentials could not be used ({type(error).__name__})"
    return CredentialsError(f"cannot read gs://: {what}; {_ADC_HELP}")


class FileTooLargeError(Exception):
    """A bounded read found a file larger than the caller allows."""

    def __init__(self, path: str, limit: int) -> None:
        super().__init__(f"{path} is larger than {limit} bytes")
        self.path = path
        self.limit = limit


@runtime_checkable
class Storage(Protocol):
    """The few operations checkpoint validation needs."""

    # Whether many small reads gain from running in threads (remote: yes; local disk: no).
    parallel_reads: bool

    def join(self, base: str, *parts: str) -> str:
        """Join path components."""
        ...

    def exists_dir(self, path: str) -> bool:
        """Whether `path` is a directory (on GCS: a non-empty prefix)."""
        ...

    def list_dir(self, path: str) -> list[Entry]:
        """Immediate children of `path`; an empty list when it does not exist."""
        ...

    def walk(self, path: str, limit: int = DEFAULT_LIST_LIMIT) -> Listing:
        """Every file (and unreadable entry) under `path`, names relative to it, at most `limit`."""
        ...

    def read(self, path: str, max_bytes: int) -> bytes:
        """The whole file; `FileNotFoundError` if absent, `FileTooLargeError` beyond `max_bytes`."""
        ...

    def move(self, src: str, dst: str) -> None:
        """Move the directory `src` to `dst` (which must not exist). Never deletes data."""
        ...


def is_gcs(path: str) -> bool:
    """Whether `path` is a ``gs://`` URI."""
    return path.startswith(GCS_SCHEME)


class LocalStorage:
    """Local filesystem. Never follows directory symlinks while walking."""

    parallel_reads = False

    def join(self, base: str, *parts: str) -> str:
        """Join path components."""
        return os.path.join(base, *parts)

    def exists_dir(self, path: str) -> bool:
        """Whether `path` is a directory."""
        return os.path.isdir(path)

    def list_dir(self, path: str) -> list[Entry]:
        """Immediate children of `path`."""
        try:
            with os.scandir(path) as it:
                return [_local_entry(e.name, e.path) for e in it]
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise StorageError(f"cannot list {path}: {exc.strerror or exc}") from exc

    def walk(self, path: str, limit: int = DEFAULT_LIST_LIMIT) -> Listing:
        """Every non-directory entry under `path`, without following directory links."""
        out: list[Entry] = []
        for dirpath, dirnames, filenames in os.walk(path, followlinks=False):
            rel = os.path.relpath(dirpath, path)
            prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            # A symlink to a directory shows up in dirnames but is never entered: report it.
            names = filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
            for name in names:
                if len(out) >= limit:
                    return Listing(tuple(out), truncated=True)
                out.append(_local_entry(prefix + name, os.path.join(dirpath, name)))
        return Listing(tuple(out))

    def read(self, path: str, max_bytes: int) -> bytes:
        """Read a regular file of at most `max_bytes`; FIFOs and devices never block."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise StorageError(f"cannot open {path}: {exc.strerror or exc}") from exc
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise StorageError(f"{path} is not a regular file")
            if st.st_size > max_bytes:
                raise FileTooLargeError(path, max_bytes)
            data = f.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise FileTooLargeError(path, max_bytes)
        return data

    def move(self, src: str, dst: str) -> None:
        """Rename `src` to `dst` (atomic on one filesystem)."""
        if os.path.lexists(dst):
            raise FileExistsError(dst)
        os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
        os.rename(src, dst)


def _local_entry(name: str, full: str) -> Entry:
    try:
        st = os.stat(full)
    except OSError:
        return Entry(name, EntryKind.OTHER)
    if stat.S_ISDIR(st.st_mode):
        return Entry(name, EntryKind.DIR)
    if stat.S_ISREG(st.st_mode):
        return Entry(name, EntryKind.FILE, st.st_size)
    return Entry(name, EntryKind.OTHER)


def split_gcs(uri: str) -> tuple[str, str]:
    """``gs://bucket/a/b`` -> ``("bucket", "a/b")``; `ValueError` without a bucket."""
    if not is_gcs(uri):
        raise ValueError(f"not a gs:// URI: {uri!r}")
    bucket, _, key = uri[len(GCS_SCHEME) :].partition("/")
    if not bucket:
        raise ValueError(f"gs:// URI without a bucket: {uri!r}")
    return bucket, key.strip("/")


def default_retry(deadline: float = 120.0, initial_delay: float = 0.2) -> Retry:
    """google-cloud-storage's own retry (429, 5xx, connection errors), with a bounded deadline."""
    from google.cloud.storage.retry import DEFAULT_RETRY

    retry: Retry = DEFAULT_RETRY.with_timeout(deadline).with_delay(initial=initial_delay, maximum=8.0)
    return retry


def make_gcs_client(project: str | None = None) -> Client:
    """A client with Application Default Credentials, or anonymous when an emulator is configured.

    google-cloud-storage reads ``STORAGE_EMULATOR_HOST`` itself; it is checked here only to
    avoid looking up real credentials in that case.
    """
    from google.cloud import storage

    if os.environ.get("STORAGE_EMULATOR_HOST"):
        from google.auth.credentials import AnonymousCredentials

        return storage.Client(
            project=project or os.environ.get("GOOGLE_CLOUD_PROJECT", "test"),
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
        )
    from google.auth import exceptions

    # `project=None` would mean "no project" to google-cloud-storage: leave it out so the
    # project comes from ADC or GOOGLE_CLOUD_PROJECT, like the credentials.
    try:
        return storage.Client(project=project) if project else storage.Client()
    except exceptions.GoogleAuthError as exc:
        raise credentials_error(exc) from None


class GCSStorage:
    """``gs://`` through google-cloud-storage, with the library's retry on every call."""

    parallel_reads = True

    def __init__(
        self,
        client: Client | None = None,
        *,
        retry: Retry | None = None,
        timeout: float = 60.0,
        max_workers: int = 16,
    ) -> None:
        self._client = client
        self.retry = retry if retry is not None else default_retry()
        self.timeout = timeout
        self.max_workers = max_workers

    @property
    def client(self) -> Client:
        """The client, created on first use."""
        if self._client is None:
            self._client = make_gcs_client()
        return self._client

    def join(self, base: str, *parts: str) -> str:
        """Join URI components with ``/``."""
        out = base.rstrip("/")
        for part in parts:
            out = f"{out}/{part.strip('/')}"
        return out

    def exists_dir(self, path: str) -> bool:
        """Whether any object lives under the prefix."""
        bucket, key = split_gcs(path)
        prefix = f"{key}/" if key else ""
        blobs = self._call(
            lambda: list(
                self.client.list_blobs(bucket, prefix=prefix, max_results=1, retry=self.retry, timeout=self.timeout)
            ),
            path,
        )
        return bool(blobs)

    def list_dir(self, path: str) -> list[Entry]:
        """Immediate children: objects and sub-prefixes."""
        bucket, key = split_gcs(path)
        prefix = f"{key}/" if key else ""

        def run() -> list[Entry]:
            it = self.client.list_blobs(bucket, prefix=prefix, delimiter="/", retry=self.retry, timeout=self.timeout)
            out: list[Entry] = []
            for page in it.pages:
                for blob in page:
                    name = blob.name[len(prefix) :]
                    if name:  # "" is a directory placeholder object
                        out.append(Entry(name, EntryKind.FILE, int(blob.size or 0)))
                out.extend(Entry(p[len(prefix) :].rstrip("/"), EntryKind.DIR) for p in page.prefixes)
            return out

        return self._call(run, path)

    def walk(self, path: str, limit: int = DEFAULT_LIST_LIMIT) -> Listing:
        """Every object under the prefix, listing top-level sub-prefixes in parallel."""
        top = self.list_dir(path)
        files = [e for e in top if e.kind is EntryKind.FILE]
        dirs = sorted(e.name for e in top if e.kind is EntryKind.DIR)
        truncated = False
        if dirs:
            with ThreadPoolExecutor(max_workers=min(self.max_workers, len(dirs))) as pool:
                for sub, listing in zip(
                    dirs, pool.map(lambda d: self._flat(self.join(path, d), limit), dirs), strict=True
                ):
                    truncated |= listing.truncated
                    files.extend(Entry(f"{sub}/{e.name}", e.kind, e.size) for e in listing.entries)
        if len(files) > limit:
            return Listing(tuple(files[:limit]), truncated=True)
        return Listing(tuple(files), truncated)

    def _flat(self, path: str, limit: int) -> Listing:
        bucket, key = split_gcs(path)
        prefix = f"{key}/" if key else ""

        def run() -> Listing:
            it = self.client.list_blobs(
                bucket,
                prefix=prefix,
                max_results=limit + 1,
                retry=self.retry,
                timeout=self.timeout,
            )
            out = [
                Entry(b.name[len(prefix) :], EntryKind.FILE, int(b.size or 0)) for b in it if not b.name.endswith("/")
            ]
            if len(out) > limit:
                return Listing(tuple(out[:limit]), truncated=True)
            return Listing(tuple(out))

        return self._call(run, path)

    def read(self, path: str, max_bytes: int) -> bytes:
        """Download at most `max_bytes` + 1 bytes (a ranged read) and refuse anything larger."""
        from google.api_core import exceptions
        from google.auth import exceptions as auth_exceptions

        bucket, key = split_gcs(path)
        blob = self.client.bucket(bucket).blob(key)
        try:
            data: bytes = blob.download_as_bytes(
                start=0, end=max_bytes, retry=self.retry, timeout=self.timeout, checksum=None
            )
        except exceptions.NotFound as exc:
            raise FileNotFoundError(path) from exc
        except exceptions.RequestRangeNotSatisfiable:
            return b""  # an empty object
        except exceptions.GoogleAPIError as exc:
            raise StorageError(f"cannot read {path}: {exc}") from exc
        except auth_exceptions.GoogleAuthError as exc:
            raise credentials_error(exc) from None
        if len(data) > max_bytes:
            raise FileTooLargeError(path, max_bytes)
        return data

    def move(self, src: str, dst: str) -> None:
        """Copy every object under `src` to `dst`, then delete each source once its copy exists."""
        from google.api_core import exceptions

        src_bucket_name, _ = split_gcs(src)
        dst_bucket_name, dst_key = split_gcs(dst)
        if self.exists_dir(dst):
            raise FileExistsError(dst)
        listing = self.walk(src)
        src_bucket = self.client.bucket(src_bucket_name)
        dst_bucket = self.client.bucket(dst_bucket_name)

        def move_one(entry: Entry) -> None:
            blob = src_bucket.blob(f"{split_gcs(src)[1]}/{entry.name}")
            # if_generation_match=0 makes the copy idempotent, so the library may retry it; a 412
            # then means an earlier attempt already made the copy.
            with contextlib.suppress(exceptions.PreconditionFailed):
                src_bucket.copy_blob(
                    blob,
                    dst_bucket,
                    f"{dst_key}/{entry.name}",
                    if_generation_match=0,
                    retry=self.retry,
                    timeout=self.timeout,
                )
            blob.delete(retry=self.retry, timeout=self.timeout)

        with ThreadPoolExecutor(max_workers=self.max_workers) as pool:
            list(pool.map(move_one, listing.entries))

    def _call(self, fn: Callable[[], _T], path: str) -> _T:
        from google.api_core import exceptions
        from google.auth import exceptions as auth_exceptions

        try:
            return fn()
        except exceptions.NotFound as exc:
            raise StorageError(f"{path}: bucket not found") from exc
        except exceptions.GoogleAPIError as exc:
            raise StorageError(f"cannot list {path}: {exc}") from exc
        except auth_exceptions.GoogleAuthError as exc:
            raise credentials_error(exc) from None


def storage_for(path: str) -> Storage:
    """The storage that serves `path`."""
    if is_gcs(path):
        split_gcs(path)
        return GCSStorage()
    return LocalStorage()

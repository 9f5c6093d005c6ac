"""A small storage interface for checkpoint validation: local disk and ``gs://``.

Paths are plain strings: filesystem paths for `LocalStorage`, ``gs://bucket/key`` URIs for
`GCSStorage`. Every read is bounded and every listing is capped, so hostile trees (huge files,
FIFOs, symlink loops, millions of entries) give an answer instead of a hang. A cap bounds the
names fetched, not only those returned: GCS listings ask for pages no larger than what is left
of the cap (``maxResults``, which counts objects and prefixes alike in the JSON API), and stop.
A directory that cannot be listed is reported as an `EntryKind.UNREADABLE_DIR` entry, so a
validator tells it apart from files that are absent. Moves are in `operators.checkpoints.moving`.
"""

from __future__ import annotations

import functools
import os
import stat
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

from elastic_training.operators.checkpoints.locations import GCS_SCHEME, StorageError, is_gcs, split_gcs
from elastic_training.operators.checkpoints.moving import move_gcs, move_local

if TYPE_CHECKING:
    from google.api_core.retry import Retry
    from google.cloud.storage import Client

__all__ = ["GCS_SCHEME", "StorageError", "is_gcs", "split_gcs"]  # re-exported: their home is `locations`

_T = TypeVar("_T")
DEFAULT_LIST_LIMIT = 1_000_000
# The JSON API's largest (and default) page for objects.list.
GCS_PAGE_SIZE = 1000


class EntryKind(StrEnum):
    """What a listed name is.

    `OTHER` covers FIFOs, sockets, devices and broken or looping links; `UNREADABLE_DIR` is a
    directory whose own listing failed (permissions, I/O error), so what it holds is unknown.
    """

    FILE = "file"
    DIR = "dir"
    OTHER = "other"
    UNREADABLE_DIR = "unreadable_dir"


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


class ListingTooLargeError(StorageError):
    """A directory holds more entries than the caller allows; listing stopped at the cap."""

    def __init__(self, path: str, limit: int) -> None:
        super().__init__(f"{path} holds more than {limit} entries; listing stopped there")
        self.path = path
        self.limit = limit


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

    def list_dir(self, path: str, limit: int = DEFAULT_LIST_LIMIT) -> list[Entry]:
        """Immediate children of `path`; an empty list when it does not exist.

        `ListingTooLargeError` when there are more than `limit` (no more than that are fetched).
        """
        ...

    def walk(self, path: str, limit: int = DEFAULT_LIST_LIMIT) -> Listing:
        """Every file (and unreadable entry or directory) under `path`, names relative to it.

        At most `limit` names are fetched in all; `truncated` says there were more.
        """
        ...

    def read(self, path: str, max_bytes: int) -> bytes:
        """The whole file; `FileNotFoundError` if absent, `FileTooLargeError` beyond `max_bytes`."""
        ...

    def move(self, src: str, dst: str) -> None:
        """Move the directory `src` to `dst`, which must not exist (`FileExistsError`).

        Never loses data: on any error the source is whole and `MoveError` says what is where.
        """
        ...


class LocalStorage:
    """Local filesystem. Never follows directory symlinks while walking."""

    parallel_reads = False

    def join(self, base: str, *parts: str) -> str:
        """Join path components."""
        return os.path.join(base, *parts)

    def exists_dir(self, path: str) -> bool:
        """Whether `path` is a directory."""
        return os.path.isdir(path)

    def list_dir(self, path: str, limit: int = DEFAULT_LIST_LIMIT) -> list[Entry]:
        """Immediate children of `path`, at most `limit` (`ListingTooLargeError` beyond)."""
        out: list[Entry] = []
        try:
            with os.scandir(path) as it:
                for e in it:
                    if len(out) >= limit:
                        raise ListingTooLargeError(path, limit)
                    out.append(_local_entry(e.name, e.path))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise StorageError(f"cannot list {path}: {exc.strerror or exc}") from exc
        return out

    def walk(self, path: str, limit: int = DEFAULT_LIST_LIMIT) -> Listing:
        """Every non-directory entry under `path`, without following directory links.

        A directory whose listing fails is one `UNREADABLE_DIR` entry (``""`` for `path` itself);
        `os.walk` would otherwise skip it silently and its files would look absent.
        """
        out: list[Entry] = []
        if not os.path.isdir(path):
            return Listing(())
        failed: list[OSError] = []

        def onerror(exc: OSError) -> None:
            # A directory removed while walking is gone, not unreadable.
            if not isinstance(exc, FileNotFoundError | NotADirectoryError):
                failed.append(exc)

        for dirpath, dirnames, filenames in os.walk(path, onerror=onerror, followlinks=False):
            rel = os.path.relpath(dirpath, path)
            prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            # A symlink to a directory shows up in dirnames but is never entered: report it.
            names = filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
            for name in names:
                if len(out) >= limit:
                    return Listing(tuple(out), truncated=True)
                out.append(_local_entry(prefix + name, os.path.join(dirpath, name)))
            # os.walk reports a directory it cannot list through onerror, before moving on.
            while failed:
                if len(out) >= limit:
                    return Listing(tuple(out), truncated=True)
                out.append(_unreadable_dir(path, failed.pop(0)))
        for exc in failed:  # the last directory visited, or `path` itself
            if len(out) >= limit:
                return Listing(tuple(out), truncated=True)
            out.append(_unreadable_dir(path, exc))
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
        """Rename `src` to `dst` on one filesystem; never replaces `dst`, never copies."""

        move_local(src, dst)


def _unreadable_dir(root: str, exc: OSError) -> Entry:
    where = exc.filename if isinstance(exc.filename, str) else root
    rel = os.path.relpath(where, root)
    return Entry("" if rel == "." else rel.replace(os.sep, "/"), EntryKind.UNREADABLE_DIR)


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
        page_size: int = GCS_PAGE_SIZE,
    ) -> None:
        self._client = client
        self.retry = retry if retry is not None else default_retry()
        self.timeout = timeout
        self.max_workers = max_workers
        self.page_size = page_size

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

    def list_dir(self, path: str, limit: int = DEFAULT_LIST_LIMIT) -> list[Entry]:
        """Immediate children: objects and sub-prefixes, at most `limit` of them fetched."""
        budget = _Budget(limit)
        entries = self._list(path, budget, delimiter="/")
        if budget.exceeded:
            raise ListingTooLargeError(path, limit)
        return entries

    def walk(self, path: str, limit: int = DEFAULT_LIST_LIMIT) -> Listing:
        """Every object under the prefix, listing top-level sub-prefixes in parallel.

        One budget of `limit` names is shared by every listing (the top-level prefixes count),
        so no more than that is fetched whatever the shape of the tree.
        """
        budget = _Budget(limit)
        top = self._list(path, budget, delimiter="/")
        files = [e for e in top if e.kind is EntryKind.FILE]
        dirs = sorted(e.name for e in top if e.kind is EntryKind.DIR)
        if dirs and not budget.exceeded:
            with ThreadPoolExecutor(max_workers=min(self.max_workers, len(dirs))) as pool:
                for sub, entries in zip(
                    dirs, pool.map(lambda d: self._flat(self.join(path, d), budget), dirs), strict=True
                ):
                    files.extend(Entry(f"{sub}/{e.name}", e.kind, e.size) for e in entries)
        if len(files) > limit:
            return Listing(tuple(files[:limit]), truncated=True)
        return Listing(tuple(files), budget.exceeded)

    def _flat(self, path: str, budget: _Budget) -> list[Entry]:
        """Every object under the prefix (no delimiter), within `budget`."""
        return self._list(path, budget, delimiter=None)

    def _list(self, path: str, budget: _Budget, delimiter: str | None) -> list[Entry]:
        """Page through ``objects.list`` under the prefix, asking for no more than the budget holds."""
        bucket, key = split_gcs(path)
        prefix = f"{key}/" if key else ""
        out: list[Entry] = []
        token: str | None = None
        while True:
            want = budget.take(self.page_size)
            if want == 0:
                return out
            try:
                names, token = self._call(functools.partial(self._page, bucket, prefix, delimiter, want, token), path)
            except BaseException:
                budget.settle(want, 0)
                raise
            budget.settle(want, min(want, len(names)))
            if len(names) > want:
                # An emulator may ignore maxResults and answer with everything at once: keep no
                # more than the budget allows.
                extra = budget.take(len(names) - want)
                budget.settle(extra, extra)
                if want + extra < len(names):
                    names, token = names[: want + extra], None
                    budget.exceeded = True
            for name, kind, size in names:
                rel = name[len(prefix) :].rstrip("/") if kind is EntryKind.DIR else name[len(prefix) :]
                # A directory placeholder object ("<prefix>/" or "a/") is not a file.
                if rel and not (kind is EntryKind.FILE and rel.endswith("/")):
                    out.append(Entry(rel, kind, size))
            if token is None:
                return out

    def _page(
        self, bucket: str, prefix: str, delimiter: str | None, size: int, token: str | None
    ) -> tuple[list[tuple[str, EntryKind, int]], str | None]:
        """One page of ``objects.list``: (name, kind, size) in name order, and the next page's token."""
        it = self.client.list_blobs(
            bucket,
            prefix=prefix,
            delimiter=delimiter,
            page_size=size,
            page_token=token,
            retry=self.retry,
            timeout=self.timeout,
        )
        page = next(it.pages, None)
        if page is None:
            return [], None
        names = [(b.name, EntryKind.FILE, int(b.size or 0)) for b in page]
        names.extend((p, EntryKind.DIR, 0) for p in page.prefixes)
        names.sort()
        return names, it.next_page_token

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
        """Copy every object under `src` to `dst`, verify each copy, then delete the sources.

        See `operators.checkpoints.moving.move_gcs`.
        """

        move_gcs(self, src, dst)

    def _call(self, fn: Callable[[], _T], path: str) -> _T:
        """Run one library call, turning its errors into `StorageError`."""
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


class _Budget:
    """How many more names a listing may fetch, shared by listings that run in parallel.

    A listing reserves a page's worth before asking and gives back what the page did not use. A
    reservation fails only once every name is spent and none is held by a page in flight, so a
    listing never stops early because another one had reserved more than it got.
    """

    def __init__(self, limit: int) -> None:
        # One more than the cap, to see whether there is more.
        self._left = limit + 1
        self._held = 0
        self._cond = threading.Condition()
        self.exceeded = False

    def take(self, n: int) -> int:
        """Reserve up to `n` names; 0 when the budget is spent."""
        with self._cond:
            while self._left == 0 and self._held > 0:
                self._cond.wait()
            got = min(n, self._left)
            self._left -= got
            self._held += got
            return got

    def settle(self, reserved: int, used: int) -> None:
        """A page asked for `reserved` names and got `used`."""
        with self._cond:
            self._held -= reserved
            self._left += reserved - used
            if self._left == 0 and self._held == 0:
                # limit + 1 names were fetched: more than the cap.
                self.exceeded = True
            self._cond.notify_all()


def storage_for(path: str) -> Storage:
    """The storage that serves `path`."""
    if is_gcs(path):
        split_gcs(path)
        return GCSStorage()
    return LocalStorage()

"""Moving a step directory aside without ever losing data, on local disk and on ``gs://``.

Locally a move is one ``rename`` on one filesystem, with Linux's ``RENAME_NOREPLACE`` so an
existing destination is never replaced (``rename(2)`` alone silently replaces an empty
directory). Across filesystems nothing is moved: a copy would not be atomic.

GCS has no rename: an object is copied and its source deleted (as ``gcloud storage mv`` does).
`move_gcs` lists every object under the source (paging through ``objects.list``), copies each
one conditionally (``ifGenerationMatch=0``: never over an existing object, and safe for the
library to retry), checks every copy against its source (size, then CRC32C, else MD5), and only
when all are copied and checked deletes each source object on the generation it copied
(``ifGenerationMatch=<generation>``, so a source rewritten meanwhile is kept). Any conflict or
error before the deletes leaves every source object in place and removes the copies it made;
an error during the deletes leaves a whole, checked copy under the destination. Either way
`MoveError` says which objects are where.
"""

from __future__ import annotations

import ctypes
import errno
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from elastic_training.operators.checkpoints.locations import GCS_SCHEME, StorageError, split_gcs

if TYPE_CHECKING:
    from google.api_core.retry import Retry
    from google.cloud.storage import Blob, Bucket, Client


class GCSMover(Protocol):
    """What a move on ``gs://`` needs of the storage it goes through (`GCSStorage` has it)."""

    @property
    def client(self) -> Client: ...
    @property
    def retry(self) -> Retry: ...
    @property
    def timeout(self) -> float: ...
    @property
    def page_size(self) -> int: ...
    @property
    def max_workers(self) -> int: ...


# <linux/fs.h>: fail with EEXIST instead of replacing the destination.
_RENAME_NOREPLACE = 1
_AT_FDCWD = -100
# How many object names an error message spells out per place.
_NAMES_SHOWN = 10


class MoveError(StorageError):
    """A move stopped part-way; no data was lost. The fields say which objects are where.

    Names are relative to the source (and destination) directory.
    """

    def __init__(
        self,
        src: str,
        dst: str,
        cause: str,
        *,
        only_at_src: Sequence[str] = (),
        at_both: Sequence[str] = (),
        only_at_dst: Sequence[str] = (),
    ) -> None:
        self.src = src
        self.dst = dst
        self.cause = cause
        self.only_at_src = tuple(sorted(only_at_src))
        self.at_both = tuple(sorted(at_both))
        self.only_at_dst = tuple(sorted(only_at_dst))
        places = [
            _place(f"only under {src}", self.only_at_src),
            _place(f"under both {src} and {dst}", self.at_both),
            _place(f"only under {dst} (moved)", self.only_at_dst),
        ]
        super().__init__(f"moving {src} to {dst} stopped: {cause}. " + "; ".join(p for p in places if p))


def _place(where: str, names: Sequence[str]) -> str:
    if not names:
        return ""
    shown = ", ".join(names[:_NAMES_SHOWN])
    more = f" and {len(names) - _NAMES_SHOWN} more" if len(names) > _NAMES_SHOWN else ""
    return f"{len(names)} object(s) {where}: {shown}{more}"


def move_local(src: str, dst: str) -> None:
    """Rename the directory `src` to `dst`; `FileExistsError` if `dst` exists, even as an empty directory."""
    if not os.path.isdir(src) or os.path.islink(src):
        raise FileNotFoundError(src)
    os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
    try:
        if not _rename_noreplace(src, dst):
            # No renameat2 here (not Linux, or a filesystem without it): check, then rename.
            # rename(2) replaces only an empty directory, so a destination made in between
            # loses nothing.
            if os.path.lexists(dst):
                raise FileExistsError(errno.EEXIST, "destination exists; nothing was moved", dst)
            os.rename(src, dst)
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
            raise FileExistsError(errno.EEXIST, "destination exists; nothing was moved", dst) from exc
        if exc.errno == errno.EXDEV:
            raise StorageError(
                f"cannot move {src} to {dst}: they are on different filesystems; nothing was moved"
            ) from exc
        raise StorageError(f"cannot move {src} to {dst}: {exc.strerror or exc}; nothing was moved") from exc


def _rename_noreplace(src: str, dst: str) -> bool:
    """``renameat2(RENAME_NOREPLACE)``; False when the system or filesystem does not offer it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    if renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL):
        return False
    raise OSError(err, os.strerror(err), dst)


@dataclass(frozen=True)
class _Copied:
    """A destination object that matches its source."""

    name: str
    generation: int | None
    ours: bool  # made by this move (else: found already there, identical)


class _Failed(Exception):
    """One object could not be copied (or its copy does not match)."""

    def __init__(self, name: str, why: str, made: _Copied | None = None) -> None:
        super().__init__(f"{name}: {why}")
        self.name = name
        self.why = why
        self.made = made  # a mismatching copy this move made, to remove again


def move_gcs(storage: GCSMover, src: str, dst: str) -> None:
    """Move every object under the prefix `src` to `dst` (see the module docstring)."""
    move = _GCSMove.start(storage, src, dst)
    move.refuse_a_used_destination()
    sources = move.list_sources()
    move.copy_all(sources)
    move.delete_all(sources)
    move.refuse_late_sources(sources)


@dataclass(frozen=True)
class _Side:
    """One end of a move: the bucket and the object-name prefix (``key/``) under it."""

    bucket_name: str
    bucket: Bucket
    prefix: str


@dataclass(frozen=True)
class _GCSMove:
    """One move on ``gs://``: both ends and the storage's call options, fixed before anything is read.

    Each step raises when the move must stop; the steps run in `move_gcs`'s order.
    """

    src: str
    dst: str
    client: Client
    source: _Side
    target: _Side
    call: dict[str, Any]
    page_size: int
    workers: int

    @classmethod
    def start(cls, storage: GCSMover, src: str, dst: str) -> _GCSMove:
        """The move from `src` to `dst`, refusing a whole bucket or two overlapping prefixes; nothing is read yet."""
        src_bucket_name, src_key = split_gcs(src)
        dst_bucket_name, dst_key = split_gcs(dst)
        if not src_key or not dst_key:
            raise ValueError(f"refusing to move a whole bucket: {src} -> {dst}")
        if src_bucket_name == dst_bucket_name and (
            src_key == dst_key or dst_key.startswith(f"{src_key}/") or src_key.startswith(f"{dst_key}/")
        ):
            raise ValueError(f"{src} and {dst} overlap")
        client = storage.client
        return cls(
            src=src,
            dst=dst,
            client=client,
            source=_Side(src_bucket_name, client.bucket(src_bucket_name), f"{src_key}/"),
            target=_Side(dst_bucket_name, client.bucket(dst_bucket_name), f"{dst_key}/"),
            call={"retry": storage.retry, "timeout": storage.timeout},
            page_size=storage.page_size,
            workers=storage.max_workers,
        )

    def _listed(self, side: _Side, page_size: int, max_results: int | None = None) -> list[Blob]:
        from google.api_core import exceptions

        try:
            # The library's iterator follows nextPageToken until the listing ends.
            return list(
                self.client.list_blobs(
                    side.bucket_name, prefix=side.prefix, page_size=page_size, max_results=max_results, **self.call
                )
            )
        except exceptions.GoogleAPIError as exc:
            raise StorageError(
                f"cannot list {GCS_SCHEME}{side.bucket_name}/{side.prefix}; nothing was moved: {exc}"
            ) from exc

    def refuse_a_used_destination(self) -> None:
        """`FileExistsError` when any object is already under the destination."""
        already = self._listed(self.target, 1, max_results=1)
        if already:
            raise FileExistsError(
                errno.EEXIST, f"destination already holds {already[0].name}; nothing was moved", self.dst
            )

    def list_sources(self) -> dict[str, Blob]:
        """Every source object by its name relative to the source; `FileNotFoundError` when there is none."""
        prefix = self.source.prefix
        sources = {b.name[len(prefix) :]: b for b in self._listed(self.source, self.page_size)}
        if not sources:
            raise FileNotFoundError(self.src)
        return sources

    def copy_all(self, sources: dict[str, Blob]) -> None:
        """Copy and check every object; on any failure remove the copies made and raise, deleting no source."""
        copies, failures = _each(lambda rel: self._copy_one(rel, sources[rel]), sorted(sources), self.workers)
        if not failures:
            return
        made = [c for c in copies if c.ours] + [f.made for f in failures if f.made is not None]
        left = _remove_copies(self.target.bucket, self.target.prefix, made, self.call)
        at_dst = {c.name for c in copies if not c.ours} | left
        first = min(failures, key=lambda f: f.name)
        raise MoveError(
            self.src,
            self.dst,
            f"{first}; no source object was deleted"
            + (f" ({len(failures)} objects failed)" if len(failures) > 1 else ""),
            only_at_src=sorted(set(sources) - at_dst),
            at_both=sorted(at_dst),
        )

    def _copy_one(self, rel: str, blob: Blob) -> _Copied:
        from google.api_core import exceptions

        target = self.target.prefix + rel
        try:
            made = self.source.bucket.copy_blob(
                blob,
                self.target.bucket,
                target,
                if_generation_match=0,
                if_source_generation_match=blob.generation,
                **self.call,
            )
        except exceptions.PreconditionFailed:
            # The destination exists (a conflict, or a retried copy whose first try went through),
            # or the source changed since it was listed.
            return self._found_copy(rel, blob, target)
        except exceptions.GoogleAPIError as exc:
            raise _Failed(rel, f"copy failed: {exc}") from exc
        copied = _Copied(rel, made.generation, ours=True)
        mismatch = _mismatch(blob, made)
        if mismatch:
            raise _Failed(rel, f"the copy does not match its source ({mismatch})", copied)
        return copied

    def _found_copy(self, rel: str, blob: Blob, target: str) -> _Copied:
        """The object already at `target`, when it is a copy of `blob` (a copy refused on a precondition)."""
        made = self.target.bucket.get_blob(target, **self.call)
        if made is None:
            raise _Failed(rel, "the source object changed since it was listed") from None
        mismatch = _mismatch(blob, made)
        if mismatch:
            raise _Failed(
                rel,
                f"the destination object {GCS_SCHEME}{self.target.bucket_name}/{target} already exists ({mismatch})",
            ) from None
        return _Copied(rel, made.generation, ours=False)

    def delete_all(self, sources: dict[str, Blob]) -> None:
        """Delete every source object on the generation copied; on any failure raise, naming what is where."""
        deleted, failures = _each(
            lambda rel: _delete_source(rel, sources[rel], self.call), sorted(sources), self.workers
        )
        if failures:
            first = min(failures, key=lambda f: f.name)
            raise MoveError(
                self.src,
                self.dst,
                f"{first}; every object was copied to {self.dst} and checked",
                at_both=sorted(set(sources) - set(deleted)),
                only_at_dst=deleted,
            )

    def refuse_late_sources(self, sources: dict[str, Blob]) -> None:
        """`MoveError` when an object appeared under the source while the move ran."""
        late = self._listed(self.source, 1, max_results=1)
        if late:
            raise MoveError(
                self.src,
                self.dst,
                f"{late[0].name} appeared under {self.src} during the move and was not moved",
                only_at_dst=sorted(sources),
            )


def _delete_source(rel: str, blob: Blob, call: dict[str, Any]) -> str:
    from google.api_core import exceptions

    try:
        # Only the generation that was copied and checked: a source rewritten since is kept.
        blob.delete(if_generation_match=blob.generation, **call)
    except exceptions.NotFound:
        pass  # a retried delete whose first try went through
    except exceptions.PreconditionFailed as exc:
        raise _Failed(rel, "the source object changed after it was copied; kept") from exc
    except exceptions.GoogleAPIError as exc:
        raise _Failed(rel, f"delete failed: {exc}") from exc
    return rel


def _mismatch(src: Blob, dst: Blob) -> str:
    """Why `dst` is not a copy of `src` ("" when it is): size, then CRC32C, else MD5."""
    if src.size != dst.size:
        return f"size {dst.size} != {src.size}"
    if src.crc32c and dst.crc32c:
        return "" if src.crc32c == dst.crc32c else f"crc32c {dst.crc32c} != {src.crc32c}"
    if src.md5_hash and dst.md5_hash:
        return "" if src.md5_hash == dst.md5_hash else f"md5 {dst.md5_hash} != {src.md5_hash}"
    return "no checksum to compare"


def _each(fn: Callable[[str], Any], names: Iterable[str], workers: int) -> tuple[list[Any], list[_Failed]]:
    """Run `fn` on every name in threads; after the first failure, start no new ones."""
    stop = threading.Event()
    done: list[Any] = []
    failed: list[_Failed] = []
    lock = threading.Lock()

    def run(name: str) -> None:
        if stop.is_set():
            return
        try:
            result = fn(name)
        except _Failed as exc:
            stop.set()
            with lock:
                failed.append(exc)
            return
        except Exception as exc:  # anything else the library raises still stops the move
            stop.set()
            with lock:
                failed.append(_Failed(name, f"{type(exc).__name__}: {exc}"))
            return
        with lock:
            done.append(result)

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        list(pool.map(run, names))
    return done, failed


def _remove_copies(bucket: Bucket, prefix: str, copies: Iterable[_Copied], call: dict[str, Any]) -> set[str]:
    """Delete copies this move made (each on its own generation); the names that could not be."""
    from google.api_core import exceptions

    left: set[str] = set()
    for copy in copies:
        try:
            bucket.blob(prefix + copy.name).delete(if_generation_match=copy.generation, **call)
        except exceptions.NotFound:
            pass
        except exceptions.GoogleAPIError:
            left.add(copy.name)
    return left

"""A real GCS emulator (`gcp-storage-emulator`) started by the tests, and a 503-injecting proxy.

Fixtures (registered from tests/conftest.py):

- ``gcs_emulator_server`` (session): starts the emulator in memory on a port the kernel picks
  (no free-port race), stops it at the end of the session. Sets no environment.
- ``gcs_emulator``: the same `GCSEmulator`, with the environment that google-cloud-storage,
  gcsfs and tensorstore read (``STORAGE_EMULATOR_HOST``, ``TENSORSTORE_GCS_HTTP_URL``, ...) set
  for the duration of the test only.
- ``gcs_bucket``: a fresh, uniquely named bucket on that emulator; yields ``gs://<bucket>``.
- ``flaky_gcs``: a `FlakyProxy` in front of the emulator; ``proxy.fail_next(n)`` makes the next
  n requests answer 503.
- ``strict_gcs``: a `StrictProxy` in front of the emulator that adds what GCS does and the
  emulator does not (list pages, ``ifGenerationMatch``), counts what it serves, and can fail or
  interfere with the n-th request of a kind.

Known emulator limits (gcp-storage-emulator 2026.7.19): it serves one request at a time, ignores
``ifGenerationMatch`` and sends no ``x-goog-generation`` header on media downloads. Tensorstore
then has no generation for an object it has read, and refuses its next conditional write of that
object with ``ValueError: ... Malformed StorageGeneration``. OCDBT re-reads and conditionally
rewrites ``manifest.ocdbt`` whenever another tensorstore context wrote it first (Orbax's handlers
do, concurrently), so OCDBT checkpoints must be written locally and uploaded; zarr writes are
unconditional and may go straight to the emulator.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import selectors
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any

import pytest

_ENV = {
    "GOOGLE_AUTH_TOKEN_FOR_TESTING": "dummy",
    # Otherwise gcsfs asks the real Google API for the bucket type (60 s hang per call).
    "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
    "GOOGLE_CLOUD_PROJECT": "test",
}
# gcsfs reads this one once, when it is first imported: set it before any test can import gcsfs.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")


class GCSEmulator:
    """A running emulator: its endpoint and a few helpers."""

    def __init__(self, endpoint: str, process: subprocess.Popen[bytes], log: IO[bytes] | None = None) -> None:
        self.endpoint = endpoint
        self.process = process
        self._log = log

    @property
    def env(self) -> dict[str, str]:
        """The environment that points google-cloud-storage, gcsfs and tensorstore at this emulator."""
        return {**_ENV, "STORAGE_EMULATOR_HOST": self.endpoint, "TENSORSTORE_GCS_HTTP_URL": self.endpoint}

    @contextlib.contextmanager
    def environment(self) -> Iterator[None]:
        """Set `env` in ``os.environ`` for the duration of the block, then restore what was there."""
        saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def client(self, endpoint: str | None = None) -> Any:
        """An anonymous google-cloud-storage client for this emulator (or a proxy in front of it)."""
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(
            project="test",
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
            client_options={"api_endpoint": endpoint or self.endpoint},
        )

    def create_bucket(self, name: str | None = None) -> str:
        """Create a bucket; return its ``gs://`` URI."""
        name = name or f"b-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(name)
        return f"gs://{name}"

    def upload_dir(self, local: Path, uri: str, workers: int = 16) -> int:
        """Copy a local tree to ``gs://bucket/prefix``; return the number of objects."""
        from concurrent.futures import ThreadPoolExecutor

        bucket_name, _, prefix = uri.removeprefix("gs://").partition("/")
        bucket = self.client().bucket(bucket_name)
        files = [p for p in sorted(local.rglob("*")) if p.is_file()]

        def put(p: Path) -> None:
            key = "/".join(x for x in (prefix.strip("/"), p.relative_to(local).as_posix()) if x)
            bucket.blob(key).upload_from_filename(str(p))

        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(put, files))
        return len(files)

    def log_tail(self, limit: int = 4000) -> str:
        """The end of the emulator's stderr (warnings and tracebacks only)."""
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-limit:]

    def stop(self) -> None:
        """Stop the emulator process: close its stdin (it exits on EOF), then terminate, then kill."""
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()
        if self._log is not None:
            self._log.close()


def start_emulator(timeout: float = 30.0) -> GCSEmulator:
    """Start ``gcp-storage-emulator`` in memory on a free port (tests/support/gcs_emulator_process.py) and
    wait until it answers as the emulator."""
    log = tempfile.TemporaryFile(prefix="gcs-emulator-")  # noqa: SIM115 (GCSEmulator.stop closes it)
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("gcs_emulator_process.py"))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
    )
    emulator = GCSEmulator("", proc, log)
    try:
        assert proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout):
                raise RuntimeError(f"gcp-storage-emulator did not start within {timeout} s")
        line = proc.stdout.readline().decode().strip()
        if not line.isdigit():
            raise RuntimeError(f"gcp-storage-emulator exited with {proc.poll()}: {emulator.log_tail()}")
        emulator.endpoint = f"http://127.0.0.1:{line}"
        # The socket is listening, so this cannot be refused; it checks that the emulator answers.
        with urllib.request.urlopen(f"{emulator.endpoint}/storage/v1/b", timeout=timeout) as resp:
            if json.load(resp).get("kind") != "storage#buckets":
                raise RuntimeError(f"{emulator.endpoint} is not the GCS emulator")
    except BaseException:
        emulator.stop()
        raise
    return emulator


class _QuietServer(ThreadingHTTPServer):
    """A proxy server that says nothing when a client hangs up mid-answer (a retrying client often does)."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FlakyProxy:
    """A loopback HTTP proxy to the emulator that can fail the next N requests with 503."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.removeprefix("http://")
        self.requests = 0
        self.failed = 0
        self._to_fail = 0
        self._fail_until = 0.0
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                with proxy._lock:
                    proxy.requests += 1
                    fail = proxy._to_fail > 0 or time.monotonic() < proxy._fail_until
                    if fail:
                        proxy._to_fail = max(0, proxy._to_fail - 1)
                        proxy.failed += 1
                if fail:
                    payload = b'{"error": {"code": 503, "message": "injected"}}'
                    self.send_response(503)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                conn = http.client.HTTPConnection(proxy.upstream, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _handle

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def fail_next(self, n: int) -> None:
        """Answer the next `n` requests with 503."""
        with self._lock:
            self._to_fail = n

    def fail_for(self, seconds: float) -> None:
        """Answer every request with 503 for the next `seconds` (an outage)."""
        with self._lock:
            self._fail_until = time.monotonic() + seconds

    def clear(self) -> None:
        """Stop failing requests."""
        with self._lock:
            self._to_fail, self._fail_until = 0, 0.0

    def close(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()


def _json_error(code: int, message: str, reason: str) -> bytes:
    return json.dumps(
        {
            "error": {
                "code": code,
                "message": message,
                "errors": [{"domain": "global", "reason": reason, "message": message}],
            }
        }
    ).encode()


class StrictProxy:
    """A loopback proxy that gives the emulator the GCS JSON API semantics it lacks.

    - ``objects.list`` is served in pages: ``maxResults`` (default 1000, as GCS) counts objects
      and prefixes alike, ``nextPageToken`` continues after the last name served.
    - ``ifGenerationMatch`` (``0``: the object must not exist) on copies, rewrites, gets, patches
      and deletes, and ``ifSourceGenerationMatch`` on copies, answer 412 when they do not hold.
    - Counters: ``list_pages`` and ``listed`` (names served by list pages), and ``ops`` (how
      many requests of each kind: ``list``, ``get``, ``copy``, ``rewrite``, ``delete``, ...).
    - ``on(kind, nth, status=..., before=...)``: the nth request of a kind (counting from 1)
      answers `status` instead of reaching the emulator, or ``before(names)`` runs first with
      the request's ``[bucket, object, ...]`` (e.g. to write the object a copy is about to
      make, the way another writer would).
    - ``preconditions = False`` forwards requests as the emulator takes them (preconditions
      ignored), to exercise what a client checks for itself.

    Requests are served one at a time (the emulator does the same), so a precondition check and
    the write it guards cannot interleave with another request.
    """

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.removeprefix("http://")
        self.list_pages = 0
        self.listed = 0
        self.ops: dict[str, int] = {}
        self.preconditions = True
        self._rules: dict[tuple[str, int], tuple[int | None, Any]] = {}
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                with proxy._lock:
                    status, out_headers, data = proxy._serve(self.command, self.path, headers, body)
                self.send_response(status)
                for k, v in out_headers:
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def on(self, kind: str, nth: int, *, status: int | None = None, before: Any = None) -> None:
        """Make the `nth` request of `kind` answer `status`, or run ``before(names)`` ahead of it."""
        with self._lock:
            self._rules[(kind, nth)] = (status, before)

    def close(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()

    @staticmethod
    def _kind(method: str, parts: list[str]) -> tuple[str, list[str]]:
        """The request's kind and its (bucket, object[, bucket, object]) path parameters."""
        from urllib.parse import unquote

        if parts[:3] == ["storage", "v1", "b"] and len(parts) >= 5 and parts[4] == "o":
            names = [unquote(p) for p in parts[3:]]
            if len(parts) == 5:
                return ("list" if method == "GET" else "insert"), names[:1]
            # /storage/v1/b/<bucket>/o/<object>/copyTo/b/<bucket>/o/<object>
            if len(parts) == 11 and parts[6] in ("copyTo", "rewriteTo"):
                return ("copy" if parts[6] == "copyTo" else "rewrite"), [names[0], names[2], names[5], names[7]]
            if len(parts) == 6:
                return {"GET": "get", "DELETE": "delete", "PATCH": "patch"}.get(method, method.lower()), [
                    names[0],
                    names[2],
                ]
        if parts[:1] == ["upload"]:
            return "upload", []
        if parts[:1] == ["download"]:
            return "download", []
        return "other", []

    def _generation(self, bucket: str, name: str) -> str | None:
        from urllib.parse import quote

        status, _, data = self._forward(
            "GET", f"/storage/v1/b/{quote(bucket, safe='')}/o/{quote(name, safe='')}", {}, None
        )
        return str(json.loads(data)["generation"]) if status == 200 else None

    def _forward(
        self, method: str, path: str, headers: dict[str, str], body: bytes | None
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(self.upstream, timeout=60)
        try:
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.getheaders(), resp.read()
        finally:
            conn.close()

    def _serve(
        self, method: str, raw_path: str, headers: dict[str, str], body: bytes | None
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        from urllib.parse import parse_qs, urlencode, urlsplit

        url = urlsplit(raw_path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        kind, names = self._kind(method, [p for p in url.path.split("/") if p])
        self.ops[kind] = self.ops.get(kind, 0) + 1
        status, before = self._rules.pop((kind, self.ops[kind]), (None, None))
        if before is not None:
            before(names)
        json_headers = [("Content-Type", "application/json")]
        if status is not None:
            return (
                status,
                json_headers,
                _json_error(status, f"injected {status} on {kind} #{self.ops[kind]}", "injected"),
            )
        if self.preconditions and kind in ("copy", "rewrite", "get", "patch", "delete") and names:
            target = (names[2], names[3]) if kind in ("copy", "rewrite") else (names[0], names[1])
            checks = []
            if "ifGenerationMatch" in query:
                checks.append((target, query["ifGenerationMatch"]))
            if kind in ("copy", "rewrite") and "ifSourceGenerationMatch" in query:
                checks.append(((names[0], names[1]), query["ifSourceGenerationMatch"]))
            for (bucket, name), want in checks:
                have = self._generation(bucket, name)
                if (want == "0" and have is not None) or (want != "0" and have != want):
                    message = "At least one of the pre-conditions you specified did not hold."
                    return 412, json_headers, _json_error(412, message, "conditionNotMet")
        if kind != "list":
            return self._forward(method, raw_path, headers, body)
        page_size = int(query.pop("maxResults", "1000"))
        token = query.pop("pageToken", None)
        status, out_headers, data = self._forward(method, f"{url.path}?{urlencode(query)}", headers, body)
        if status != 200:
            return status, out_headers, data
        listing = json.loads(data)
        names_served = sorted(
            [("item", i["name"], i) for i in listing.get("items") or []]
            + [("prefix", p, p) for p in listing.get("prefixes") or []],
            key=lambda e: e[1],
        )
        if token is not None:
            after = base64.urlsafe_b64decode(token.encode()).decode()
            names_served = [e for e in names_served if e[1] > after]
        page, rest = names_served[:page_size], names_served[page_size:]
        self.list_pages += 1
        self.listed += len(page)
        out: dict[str, Any] = {
            "kind": "storage#objects",
            "items": [e[2] for e in page if e[0] == "item"],
            "prefixes": [e[2] for e in page if e[0] == "prefix"],
        }
        if rest:
            out["nextPageToken"] = base64.urlsafe_b64encode(page[-1][1].encode()).decode()
        return 200, json_headers, json.dumps(out).encode()


@pytest.fixture(scope="session")
def gcs_emulator_server() -> Iterator[GCSEmulator]:
    """A GCS emulator for the whole session (no environment set: see `gcs_emulator`)."""
    emulator = start_emulator()
    try:
        yield emulator
    finally:
        emulator.stop()


@pytest.fixture
def gcs_emulator(gcs_emulator_server: GCSEmulator) -> Iterator[GCSEmulator]:
    """The session's emulator, with the client libraries' environment pointed at it for this test."""
    with gcs_emulator_server.environment():
        yield gcs_emulator_server


@pytest.fixture
def gcs_bucket(gcs_emulator: GCSEmulator) -> str:
    """A new empty bucket; the ``gs://<name>`` URI."""
    return gcs_emulator.create_bucket()


@pytest.fixture
def strict_gcs(gcs_emulator: GCSEmulator) -> Iterator[StrictProxy]:
    """A proxy in front of the emulator with GCS's paging and preconditions, counters and faults."""
    proxy = StrictProxy(gcs_emulator.endpoint)
    try:
        yield proxy
    finally:
        proxy.close()


@pytest.fixture
def flaky_gcs(gcs_emulator: GCSEmulator) -> Iterator[FlakyProxy]:
    """A proxy in front of the emulator that injects 503s on demand."""
    proxy = FlakyProxy(gcs_emulator.endpoint)
    try:
        yield proxy
    finally:
        proxy.close()

"""A real GCS emulator (`gcp-storage-emulator`) started by the tests, and a 503-injecting proxy.

Fixtures (registered from tests/conftest.py):

- ``gcs_emulator`` (session): starts the emulator on a free loopback port, sets the environment
  that google-cloud-storage, gcsfs and tensorstore read (``STORAGE_EMULATOR_HOST``,
  ``TENSORSTORE_GCS_HTTP_URL``, ...), yields a `GCSEmulator`, and stops it at the end.
- ``gcs_bucket``: a fresh, uniquely named bucket on that emulator; yields ``gs://<bucket>``.
- ``flaky_gcs``: a `FlakyProxy` in front of the emulator; ``proxy.fail_next(n)`` makes the next
  n requests answer 503.
"""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

_ENV = {
    "GOOGLE_AUTH_TOKEN_FOR_TESTING": "dummy",
    # Otherwise gcsfs asks the real Google API for the bucket type (60 s hang per call).
    "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
    "GOOGLE_CLOUD_PROJECT": "test",
}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class GCSEmulator:
    """A running emulator: its endpoint and a few helpers."""

    def __init__(self, endpoint: str, process: subprocess.Popen[bytes]) -> None:
        self.endpoint = endpoint
        self.process = process

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

    def stop(self) -> None:
        """Stop the emulator process."""
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


def start_emulator(timeout: float = 30.0) -> GCSEmulator:
    """Start ``gcp-storage-emulator`` in memory on a free port and wait until it answers."""
    exe = shutil.which("gcp-storage-emulator", path=os.path.dirname(sys.executable)) or shutil.which(
        "gcp-storage-emulator"
    )
    if exe is None:
        raise RuntimeError("gcp-storage-emulator is not installed (pip install the dev extra)")
    port = free_port()
    proc = subprocess.Popen(
        [exe, "start", "--host=127.0.0.1", f"--port={port}", "--in-memory"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"gcp-storage-emulator exited with {proc.returncode}")
        try:
            urllib.request.urlopen(f"{endpoint}/storage/v1/b", timeout=1).close()
            return GCSEmulator(endpoint, proc)
        except urllib.error.HTTPError:
            return GCSEmulator(endpoint, proc)  # any HTTP answer means it is serving
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"gcp-storage-emulator did not answer on {endpoint}") from None
            time.sleep(0.1)


class FlakyProxy:
    """A loopback HTTP proxy to the emulator that can fail the next N requests with 503."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.removeprefix("http://")
        self.requests = 0
        self.failed = 0
        self._to_fail = 0
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
                    fail = proxy._to_fail > 0
                    if fail:
                        proxy._to_fail -= 1
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

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def fail_next(self, n: int) -> None:
        """Answer the next `n` requests with 503."""
        with self._lock:
            self._to_fail = n

    def close(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="session")
def gcs_emulator() -> Iterator[GCSEmulator]:
    """A GCS emulator for the whole session, with the client libraries' environment pointed at it."""
    emulator = start_emulator()
    env = {**_ENV, "STORAGE_EMULATOR_HOST": emulator.endpoint, "TENSORSTORE_GCS_HTTP_URL": emulator.endpoint}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield emulator
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        emulator.stop()


@pytest.fixture
def gcs_bucket(gcs_emulator: GCSEmulator) -> str:
    """A new empty bucket; the ``gs://<name>`` URI."""
    return gcs_emulator.create_bucket()


@pytest.fixture
def flaky_gcs(gcs_emulator: GCSEmulator) -> Iterator[FlakyProxy]:
    """A proxy in front of the emulator that injects 503s on demand."""
    proxy = FlakyProxy(gcs_emulator.endpoint)
    try:
        yield proxy
    finally:
        proxy.close()

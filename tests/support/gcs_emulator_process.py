"""The GCS emulator's own process (started by tests/support/gcs_emulator.py's `start_emulator`).

Kept apart from the fixtures so the child imports only the emulator: the fixtures' module imports pytest,
which the child would otherwise load (with its assertion rewriter) for nothing, on every start.

Serves `gcp-storage-emulator` in memory on a port the kernel picks, prints the port, and exits when stdin
reaches EOF. Binding port 0 in the server itself leaves no window between choosing a free port and binding
it (another process could take the port, and a readiness probe would then talk to it). Stdin is a pipe
from the test process, so the emulator also exits when that process dies.

One change to the emulator (gcp-storage-emulator 2026.7.19): its `Storage` rewrites the whole metadata of
every bucket and object, as indented JSON, into its file store after every write (`_write_config_to_file`,
`storage.py`), so that a disk-backed emulator can be restarted on its data. In memory that file is read
back only when the store is created, empty, so nothing ever reads it; but the cost of each write grows
with everything the session has stored (a session's thousands of Orbax files made it 40 % of the
emulator's CPU, quadratic in the number of objects). It is turned off here, in memory mode only; the
objects, buckets and their metadata that clients see are the emulator's own, unchanged.
"""

from __future__ import annotations

import os
import sys


def serve() -> None:
    """Serve in memory on a free port, print the port, exit on stdin EOF."""
    from gcp_storage_emulator.server import create_server
    from gcp_storage_emulator.storage import Storage

    def skip_metadata_snapshot(self: Storage) -> None:
        del self  # in memory nothing reads the snapshot back (module docstring)

    Storage._write_config_to_file = skip_metadata_snapshot
    server = create_server("127.0.0.1", 0, in_memory=True)
    server.start()  # returns once the socket is bound and listening
    # The bound port is not public API: gcp-storage-emulator 2026.7.19 keeps its HTTPServer here.
    port = server._api._httpd.server_address[1]
    print(port, flush=True)
    sys.stdin.buffer.read()
    server.stop()
    os._exit(0)


if __name__ == "__main__":
    serve()

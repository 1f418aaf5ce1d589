"""Real servers on free loopback ports for tests: a threaded ``http.server`` and a self-signed certificate."""

from __future__ import annotations

import contextlib
import subprocess
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

__all__ = ["make_certificate", "threaded_server"]


@contextlib.contextmanager
def threaded_server(
    handler: type[BaseHTTPRequestHandler], *, wrap: Callable[[ThreadingHTTPServer], None] | None = None
) -> Iterator[int]:
    """Serve *handler* on a free loopback port in a daemon thread; yields the port, shuts down after.

    *wrap* may adjust the server before it starts (for example wrap its socket in TLS).
    """
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if wrap is not None:
        wrap(server)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def make_certificate(folder: Path) -> tuple[Path, Path]:
    """A fresh self-signed certificate for 127.0.0.1 (``openssl req``): ``(cert.pem, key.pem)``."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    return cert, key

"""HTTPS trust (issue 24): a self-signed endpoint without its CA is reported as a certificate error, never as
"connection refused", by every engine and by the preflight; ``SSL_CERT_FILE`` and ``REQUESTS_CA_BUNDLE``
make it trusted in every engine (h1, aiohttp, httpx)."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from bad_inputs import tls_server

from shopsimrl_core.adapters._h1 import H1Engine
from shopsimrl_core.adapters._http import AiohttpEngine, HttpxEngine, TransportError

ENGINES = {"h1": H1Engine, "aiohttp": AiohttpEngine, "httpx": HttpxEngine}

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl makes the test certificate")


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, Path]]:
    with tls_server() as found:
        yield found


def _get(kind: str, url: str) -> bytes:
    async def main() -> bytes:
        engine = ENGINES[kind](timeout=5, read_timeout=5)
        try:
            reply = await engine.request("GET", url + "/healthz")
            return reply.data
        finally:
            await engine.aclose()

    return asyncio.run(asyncio.wait_for(main(), 30))


@pytest.fixture(autouse=True)
def no_ca_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("kind", sorted(ENGINES))
def test_an_untrusted_certificate_is_named_not_called_a_refusal(kind: str, server: tuple[str, Path]) -> None:
    url, _ = server
    with pytest.raises(TransportError) as caught:
        _get(kind, url)
    text = str(caught.value)
    port = url.rsplit(":", 1)[1]
    assert text.startswith("ConnectError: TLS certificate verify failed: self-signed certificate"), text
    assert f"certificate of 127.0.0.1:{port} is not trusted" in text and "REQUESTS_CA_BUNDLE" in text
    assert "refused" not in text


@pytest.mark.parametrize("variable", ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"])
@pytest.mark.parametrize("kind", sorted(ENGINES))
def test_the_ca_variables_are_honoured_by_every_engine(
    kind: str, variable: str, server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, cert = server
    monkeypatch.setenv(variable, str(cert))
    assert b'"status": "ok"' in _get(kind, url)


@pytest.mark.parametrize("kind", sorted(ENGINES))
def test_a_bundle_that_cannot_be_read_is_named(kind: str, server: tuple[str, Path], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    url, _ = server
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tmp_path / "missing.pem"))
    with pytest.raises(TransportError, match=r"^ConnectError: REQUESTS_CA_BUNDLE=.*missing\.pem: not readable"):
        _get(kind, url)


def test_plain_http_never_reads_the_bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken REQUESTS_CA_BUNDLE concerns https only: an http:// client is not touched by it."""
    from bad_inputs import html_server

    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tmp_path / "missing.pem"))
    with html_server() as url:
        for kind in sorted(ENGINES):
            assert b"Welcome" in _get(kind, url)

"""The TLS trust every HTTP engine uses, and how a certificate failure is told apart from a refused connection.

Trust (issue 24): the system store, plus what the usual variables name — ``SSL_CERT_FILE`` and
``SSL_CERT_DIR`` (read by OpenSSL when the default paths load) and ``REQUESTS_CA_BUNDLE`` (the ``requests``
convention many clusters set for an internal CA; a file or a hashed directory, added to the store). The
h1, aiohttp and httpx engines all get the same :func:`tls_context`, so ``http_transport`` never changes
which servers are trusted.

A server whose certificate is not trusted fails the TLS handshake, which every engine reports as a
connection failure; :func:`certificate_problem` finds the verification error in its text so that the
preflight says "the TLS certificate is not trusted (self-signed certificate)" and how to fix it, instead
of "nothing answers there (connection refused)".
"""

from __future__ import annotations

import os
import re
import ssl

__all__ = ["CA_VARIABLES", "certificate_problem", "tls_context", "untrusted_detail"]

CA_VARIABLES = ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE")
"""Environment variables naming extra CA certificates, in the order they are read."""

_VERIFY = re.compile(r"certificate verify failed:?\s*([^()\]]*)", re.IGNORECASE)


def tls_context() -> ssl.SSLContext:
    """A client context trusting the system store, ``SSL_CERT_FILE``/``SSL_CERT_DIR`` and ``REQUESTS_CA_BUNDLE``.

    Raises:
        ssl.SSLError, OSError: ``REQUESTS_CA_BUNDLE`` names a file or folder that cannot be read as
            certificates (the message names the variable).
    """
    context = ssl.create_default_context()  # the system store; OpenSSL reads SSL_CERT_FILE / SSL_CERT_DIR
    bundle = os.environ.get("REQUESTS_CA_BUNDLE", "").strip()
    if bundle:
        try:
            if os.path.isdir(bundle):
                context.load_verify_locations(capath=bundle)
            else:
                context.load_verify_locations(cafile=bundle)
        except (OSError, ssl.SSLError) as exc:
            raise OSError(f"REQUESTS_CA_BUNDLE={bundle}: not readable as CA certificates ({exc})") from None
    return context


def certificate_problem(text: str) -> str | None:
    """The certificate verification failure an error *text* names, or None when it is about something else.

    For example ``self-signed certificate`` or ``Hostname mismatch, certificate is not valid for 'x'``.
    """
    found = _VERIFY.search(text)
    if found is None:
        return None
    reason = found.group(1).strip(" :;,.")
    return reason or "certificate verify failed"


def untrusted_detail(host: str, port: int, reason: str) -> str:
    """The detail of a connection that failed on the server's certificate (kept with its verify reason)."""
    return (
        f"TLS certificate verify failed: {reason} (the certificate of {host}:{port} is not trusted; "
        f"name its CA with SSL_CERT_FILE or REQUESTS_CA_BUNDLE)"
    )

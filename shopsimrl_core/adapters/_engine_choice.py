"""Which HTTP engine carries a URL: the h1 engine, or aiohttp / httpx when the environment routes it elsewhere.

``select_transport`` is the rule the model and environment clients (and ``build_engine`` in ``_http.py``)
share; proxies and ``.netrc`` are read only when the client trusts the environment.
"""

from __future__ import annotations

__all__ = ["HTTP_TRANSPORT_MODES", "select_transport"]

HTTP_TRANSPORT_MODES: tuple[str, ...] = ("auto", "h1", "aiohttp", "httpx")


def _library_for(url: str) -> str | None:
    """With ``trust_env``: the library that must carry *url*, or None to go direct (the h1 engine).

    ``"httpx"`` for an ``ALL_PROXY`` or SOCKS proxy, ``"aiohttp"`` for an ``HTTP(S)_PROXY`` or
    ``.netrc`` credentials for the host.
    """
    import urllib.request  # here, not at import: a client that does not trust the environment never needs it
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = parts.hostname or ""
    proxies = urllib.request.getproxies()
    if not urllib.request.proxy_bypass(host):
        chosen = proxies.get(parts.scheme)
        if chosen is None and proxies.get("all"):
            return "httpx"
        if chosen is not None:
            return "aiohttp" if chosen.lower().startswith(("http://", "https://")) else "httpx"
    return "aiohttp" if _netrc_has(host) else None


def _netrc_has(host: str) -> bool:
    import netrc
    import os

    path = os.environ.get("NETRC") or os.path.expanduser("~/.netrc")
    if not os.path.isfile(path):
        return False
    try:
        return netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False  # aiohttp would not use an unreadable file either


def select_transport(url: str, *, mode: str = "auto", trust_env: bool = False) -> str:
    """Name the engine a client of *url* uses: ``"h1"``, ``"aiohttp"`` or ``"httpx"``.

    ``auto``: the h1 engine, unless the URL carries credentials (aiohttp) or *trust_env* is on and
    the environment routes *url* elsewhere: an ``HTTP(S)_PROXY`` or ``.netrc`` entry → aiohttp;
    ``ALL_PROXY`` without a scheme-specific proxy, or a ``socks5://``-style proxy → httpx.
    ``h1``, ``aiohttp``, ``httpx``: always that engine (h1 never uses a proxy).

    Raises:
        ValueError: unknown *mode*, or a URL that is not ``http://`` / ``https://``.
    """
    if mode not in HTTP_TRANSPORT_MODES:
        raise ValueError(f"http_transport must be one of {', '.join(HTTP_TRANSPORT_MODES)} (got {mode!r})")
    if not url.lower().startswith(("http://", "https://")):
        raise ValueError(f"only http:// and https:// URLs are supported (got {url!r})")
    if mode == "auto":
        if "@" in url.split("/", 3)[2]:  # user:password@host: aiohttp sends it as Basic auth
            return "aiohttp"
        return (_library_for(url) if trust_env else None) or "h1"
    return mode

"""The adapters: the HTTP clients for the two services an episode talks to — the OpenAI-compatible
model endpoint (``ChatModelClient``) and the ShopSimulator environment (``ShopSimulatorClient``) —
and the transport seam beneath them.
"""

from __future__ import annotations

from shopsimrl_core._lazy import lazy_face

_EXPORTS: dict[str, str] = {
    "ShopSimulatorClient": "_environment",
    "ChatModelClient": "_model",
    "ModelOutput": "_model",
    "ModelRequestError": "_model",
    "StreamsTransport": "_transport",
    "select_transport": "_transport",
}

__getattr__, __dir__, __all__ = lazy_face(__name__, _EXPORTS)

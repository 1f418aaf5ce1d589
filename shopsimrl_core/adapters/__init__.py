"""The adapters: the HTTP clients for the two services an episode talks to.

They are the OpenAI-compatible model endpoint (``ChatModelClient``) and the ShopSimulator
environment (``ShopSimulatorClient``), with the HTTP engines beneath them (``_http.py``: aiohttp
by default, httpx for the test seam).
"""

from __future__ import annotations

from shopsimrl_core._lazy import lazy_face

_EXPORTS: dict[str, str] = {
    "ShopSimulatorClient": "_environment",
    "ChatModelClient": "_model",
    "ModelOutput": "_validation",
    "ModelRequestError": "_model",
    "ModelEndpointFault": "_model",
    "endpoint_fault": "_model",
    "Conversation": "_conversation",
    "TransportError": "_http",
    "select_transport": "_http",
    "ReplicaSet": "_replicas",
    "ReplicatedChatModelClient": "_replicas",
}

__getattr__, __dir__, __all__ = lazy_face(__name__, _EXPORTS)

"""The adapters: the HTTP clients for the two services an episode talks to.

They are the OpenAI-compatible model endpoint (``ChatModelClient``) and the ShopSimulator
environment (``ShopSimulatorClient``), with the HTTP engines beneath them (``_http.py``: aiohttp
by default, httpx for the test seam).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shopsimrl_core._lazy import lazy_face

_EXPORTS: dict[str, str] = {
    "EndpointAuth": "_auth",
    "bearer_headers": "_auth",
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

if TYPE_CHECKING:  # the same names, imported for type checkers: mypy sees real types, import stays lazy
    from shopsimrl_core.adapters._auth import EndpointAuth as EndpointAuth
    from shopsimrl_core.adapters._auth import bearer_headers as bearer_headers
    from shopsimrl_core.adapters._conversation import Conversation as Conversation
    from shopsimrl_core.adapters._environment import ShopSimulatorClient as ShopSimulatorClient
    from shopsimrl_core.adapters._http import TransportError as TransportError
    from shopsimrl_core.adapters._http import select_transport as select_transport
    from shopsimrl_core.adapters._model import ChatModelClient as ChatModelClient
    from shopsimrl_core.adapters._model import ModelEndpointFault as ModelEndpointFault
    from shopsimrl_core.adapters._model import ModelRequestError as ModelRequestError
    from shopsimrl_core.adapters._model import endpoint_fault as endpoint_fault
    from shopsimrl_core.adapters._replicas import ReplicaSet as ReplicaSet
    from shopsimrl_core.adapters._replicas import ReplicatedChatModelClient as ReplicatedChatModelClient
    from shopsimrl_core.adapters._validation import ModelOutput as ModelOutput

_getattr, __dir__, __all__ = lazy_face(__name__, _EXPORTS)
if not TYPE_CHECKING:  # hidden from type checkers: a name missing above is an error, not Any
    __getattr__ = _getattr

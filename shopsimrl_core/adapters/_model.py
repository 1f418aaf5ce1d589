"""The model adapter: an async OpenAI-compatible chat-completions client (runtime-semantics §7).

One :class:`ChatModelClient` holds ONE pooled HTTP engine (``_http.py``: aiohttp by default) for its
endpoint for the whole run; every episode in flight shares it. ``complete()`` sends the §7.1 body, retries exactly the
§7.2 failures with capped exponential backoff, assembles SSE streams (§7.5) and validates the
answer (§7.3, ``_validation.py``) into a :class:`ModelOutput`.

A 2xx answer that is a chat completion with an unusable tool call is never retried: it becomes a
protocol error, or the single policy failure ``generation_length``, on the returned output. A 2xx
answer that is no chat completion at all — an HTML page, a body that does not parse as JSON, an
error envelope without ``choices`` (a proxy's error page, a crashed server behind a gateway) — is an
**endpoint fault** (:func:`endpoint_fault`): retried like a 5xx, and when the attempts run out it
raises :class:`ModelEndpointFault`, never a protocol error the model would be charged with
(docs/runtime.md#endpoint-faults). Only transport trouble, retryable statuses and endpoint faults
consume HTTP attempts; running out of them raises :class:`ModelRequestError`.

The API key is read from the environment variable named by ``api_key_env`` at request time and
is never logged, stored, or put into an exception message.

Response validation and the output record live in ``_validation.py``; the incrementally encoded
message list in ``_conversation.py``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from shopsimrl_core._backoff import Backoff
from shopsimrl_core._clock import round_ms
from shopsimrl_core._errors import InferenceError
from shopsimrl_core._versions import MODEL_PROVIDER
from shopsimrl_core.adapters._auth import EndpointAuth
from shopsimrl_core.adapters._conversation import Conversation
from shopsimrl_core.adapters._http import Reply, TransportError, build_engine, select_transport
from shopsimrl_core.adapters._json import UNDECODED, dumps, dumps_strict, fast_loads, has_non_finite, loads_finite
from shopsimrl_core.adapters._sse import StreamAssembler, StreamFailure
from shopsimrl_core.adapters._validation import ModelOutput, validate_completion

if TYPE_CHECKING:
    import httpx

__all__ = [
    "ChatModelClient",
    "ModelEndpointFault",
    "ModelRequestError",
    "RETRYABLE_STATUSES",
    "backoff_delay",
    "endpoint_fault",
    "model_identity",
]

logger = logging.getLogger("shopsimrl_core.model")

RETRYABLE_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})


class ModelRequestError(InferenceError):
    """The model endpoint could not be used: a non-retryable status, exhausted retries, or no API key.

    It fails the episode (stage ``model_step_<N>``); the evaluator may rerun the episode.
    """

    code = "model-request-failed"


class ModelEndpointFault(ModelRequestError):
    """The endpoint kept answering 2xx with a body that is no chat completion (HTML, not JSON, an error envelope).

    A fault of the serving stack, not of the model: it fails the attempt (stage ``model_step_<N>``)
    like an exhausted 5xx, and the run probes the endpoint with a completion before going on.
    """

    code = "model-endpoint-fault"


#: how much of a faulty body the one-line message shows
_SHOWN_BYTES = 120


def endpoint_fault(data: bytes, content_type: str | None) -> str | None:
    """Why a 2xx body is no chat completion at all (an endpoint fault), or None when it is one.

    A fault: a non-JSON ``Content-Type`` (``text/html``, ``text/plain``, ...), an empty body, a body
    that does not parse as JSON even with the stdlib's ``NaN``/``Infinity`` literals, or a JSON
    object with an ``error`` key and no ``choices`` (an error envelope sent with 200). Everything
    else goes on to the §7.3 checks: a JSON array, ``{"choices": []}`` and bodies holding non-finite
    numbers stay the protocol errors the published counting names.
    """
    mime = (content_type or "").split(";", 1)[0].strip().lower()
    shown = ascii(data[:_SHOWN_BYTES].decode("utf-8", errors="replace"))
    more = "…" if len(data) > _SHOWN_BYTES else ""
    if mime and mime != "application/json" and not mime.endswith("+json") and not mime.endswith("/json"):
        return f"a {mime} body, not JSON; it starts {shown}{more}"
    if not data.strip():
        return "an empty body"
    try:
        body = json.loads(data)  # lenient on purpose: NaN/Infinity are the completion's problem (§7.3 #1)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return f"a body that is not JSON; it starts {shown}{more}"
    if isinstance(body, dict) and "choices" not in body and "error" in body:
        return f"an error object instead of a completion; it starts {shown}{more}"
    return None


def backoff_delay(attempt: int, base: float, jitter: float) -> float:
    """Sleep after failed attempt *attempt* (0-based): ``min(b·2^a, 30) + U·min(b·2^a, 1)``, U in [0, 1)."""
    return Backoff(base, 30.0, "additive").delay(attempt + 1, jitter)


def model_identity(
    *,
    base_url: str,
    model: str,
    timeout: float,
    max_retries: int,
    retry_backoff_seconds: float,
    temperature: float,
    max_tokens: int,
    top_p: float | None,
    send_seed: bool,
    tool_choice: str,
    extra_body: dict[str, Any],
    checkpoint_id: str | None = None,
    seed_mod_2_32: bool = False,
) -> dict[str, Any]:
    """The model identity of §6.3 (trace provenance form, with ``transport``).

    ``checkpoint_id`` appears only when set; ``stream``, ``trust_env`` and ``api_key_env`` never.
    """
    identity: dict[str, Any] = {"provider": MODEL_PROVIDER}
    if checkpoint_id is not None:
        identity["checkpoint_id"] = checkpoint_id
    identity["model"] = model
    identity["base_url"] = base_url.rstrip("/")
    identity["transport"] = {
        "timeout_seconds": timeout,
        "max_retries": max_retries,
        "retry_backoff_seconds": retry_backoff_seconds,
    }
    identity["sampling"] = {
        "temperature": temperature,
        "max_tokens": max_tokens,
        "top_p": top_p,
        "send_seed": send_seed,
        "tool_choice": tool_choice,
        "extra_body": extra_body,
    }
    if seed_mod_2_32:
        identity["sampling"]["seed_mod_2_32"] = True  # only when true (§22.10, §1.1 rule 3)
    return identity


class _Retryable(Exception):
    """One failed HTTP attempt that §7.2 retries."""


class _EndpointFaulted(_Retryable):
    """One 2xx answer that is no chat completion at all (retried like a 5xx)."""


class ChatModelClient:
    """Async client for ``POST {base_url}/chat/completions`` with the §7.2 retry policy.

    Use as ``async with ChatModelClient(...) as model:``; the pooled connection pool lives until
    the block exits. Calling a closed client raises ``RuntimeError``.

    **Parameters:** ``base_url`` (OpenAI base URL, e.g. ``http://127.0.0.1:30000/v1``), ``model``
    (served model name), ``api_key_env`` (variable holding the key, or None for no auth header; or
    ``auth``, an :class:`EndpointAuth`, which wins),
    ``timeout`` (seconds per HTTP attempt, applied to connect/read/write), ``max_retries`` (total
    HTTP attempts), ``retry_backoff_seconds`` (backoff base), sampling settings, ``stream`` (SSE),
    ``trust_env`` (honour proxy variables), ``max_connections`` (pool size), ``transport`` (the
    httpx seam; tests pass a ``MockTransport``; it wins over ``http_transport``), ``http_transport``
    (``auto`` | ``aiohttp`` | ``httpx``: which HTTP engine serves the pool, see ``_http.py``).
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key_env: str | None = "OPENAI_API_KEY",
        auth: EndpointAuth | None = None,
        timeout: float = 180.0,
        max_retries: int = 5,
        retry_backoff_seconds: float = 1.0,
        temperature: float = 0.0,
        top_p: float | None = None,
        max_tokens: int = 512,
        send_seed: bool = True,
        tool_choice: str = "auto",
        extra_body: dict[str, Any] | None = None,
        stream: bool = False,
        trust_env: bool = True,
        max_connections: int = 64,
        transport: httpx.AsyncBaseTransport | None = None,
        checkpoint_id: str | None = None,
        http_transport: str = "auto",
        seed_mod_2_32: bool = False,
    ) -> None:
        if max_retries < 1:
            raise ValueError("max_retries counts total HTTP attempts and must be >= 1")
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + "/chat/completions"
        self.model = model
        self.auth = auth if auth is not None else EndpointAuth(api_key_env)
        self.api_key_env = self.auth.api_key_env
        self.timeout = timeout
        self.max_retries = max_retries
        self.retry_backoff_seconds = retry_backoff_seconds
        self.temperature = temperature
        self.top_p = top_p
        self.max_tokens = max_tokens
        self.send_seed = send_seed
        self.seed_mod_2_32 = seed_mod_2_32
        self.tool_choice = tool_choice
        self.extra_body = dict(extra_body or {})
        self.stream = stream
        self.trust_env = trust_env
        self.max_connections = max_connections
        self.checkpoint_id = checkpoint_id
        self.http_transport = http_transport
        self._transport = transport
        select_transport(
            self.url, mode=http_transport, trust_env=trust_env
        )  # a bad mode fails here, not at the first call
        self._client: Any = None
        self._prefix = b'{"model":' + dumps(model) + b',"messages":'
        # the body's keys after "messages" come from build_body; extra_body may not shadow the first two.
        # Non-finite floats in the settings (only they can hold floats) take the stdlib's spelling.
        self._finite = not has_non_finite([temperature, top_p, self.extra_body])
        self._spliced = "model" not in self.extra_body and "messages" not in self.extra_body and self._finite
        self._closed = False
        # seams for tests: the sleep used for backoff and the jitter source
        self.sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep
        self.rng = random.Random()

    # -- lifecycle ------------------------------------------------------------------------------

    def _http(self) -> Any:
        if self._closed:
            raise RuntimeError("Cannot send a request, as the model client has been closed.")
        if self._client is None:
            self._client = build_engine(
                self.url,
                mode=self.http_transport,
                timeout=self.timeout,
                read_timeout=self.timeout,
                max_connections=self.max_connections,
                trust_env=self.trust_env,
                transport=self._transport,
            )
        return self._client

    @classmethod
    def from_config(
        cls, model: Any, *, transport: httpx.AsyncBaseTransport | None = None, **overrides: Any
    ) -> ChatModelClient:
        """Build the client for a config's ``model`` section (``_config.ModelConfig``).

        Every setting comes from the section; ``overrides`` replace individual keyword arguments
        (the seed probe, for instance, always sends seeds over one connection).
        """
        settings: dict[str, Any] = dict(
            base_url=model.base_url,
            model=model.name,
            auth=model.auth(),
            timeout=model.timeout,
            max_retries=model.max_retries,
            retry_backoff_seconds=model.retry_backoff_seconds,
            temperature=model.temperature,
            top_p=model.top_p,
            max_tokens=model.max_tokens,
            send_seed=model.send_seed,
            tool_choice=model.tool_choice,
            extra_body=dict(model.extra_body),
            stream=model.stream,
            trust_env=model.trust_env,
            max_connections=model.max_connections,
            checkpoint_id=model.checkpoint_id,
            http_transport=model.http_transport,
            seed_mod_2_32=model.seed_mod_2_32,
        )
        settings.update(overrides)
        return cls(transport=transport, **settings)

    async def __aenter__(self) -> ChatModelClient:
        self._http()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool. Idempotent."""
        self._closed = True
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    @property
    def identity(self) -> dict[str, Any]:
        """The model identity (§6.3) of this client's settings."""
        return model_identity(
            base_url=self.base_url,
            model=self.model,
            timeout=self.timeout,
            max_retries=self.max_retries,
            retry_backoff_seconds=self.retry_backoff_seconds,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            top_p=self.top_p,
            send_seed=self.send_seed,
            tool_choice=self.tool_choice,
            extra_body=self.extra_body,
            checkpoint_id=self.checkpoint_id,
            seed_mod_2_32=self.seed_mod_2_32,
        )

    # -- request --------------------------------------------------------------------------------

    def build_body(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, seed: int | None
    ) -> dict[str, Any]:
        """The request body of §7.1, keys in contract order (later keys overwrite ``extra_body``)."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "stream": self.stream,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        body.update(self.extra_body)
        if self.top_p is not None:
            body["top_p"] = self.top_p
        if self.send_seed and seed is not None:
            body["seed"] = self.sent_seed(seed)
        if tools:
            body["tools"] = tools
            body["tool_choice"] = self.tool_choice
        return body

    def encode_body(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, seed: int | None
    ) -> bytes:
        """The bytes of :meth:`build_body` as sent: compact UTF-8 JSON, keys in the same order.

        A :class:`Conversation` contributes the kept bytes of its earlier messages; only the new
        ones are encoded.
        """
        if not self._spliced:
            return dumps_strict(self.build_body(list(messages), tools, seed))
        rest = self.build_body([], tools, seed)
        del rest["model"], rest["messages"]
        items: Any = messages.encoded_items() if isinstance(messages, Conversation) else b",".join(map(dumps, messages))
        # one copy of the conversation's bytes into the body, none into intermediate objects
        return b"".join((self._prefix, b"[", items, b"],", dumps(rest)[1:]))

    def sent_seed(self, seed: int | None) -> int | None:
        """The seed that goes on the wire for *seed* (None when seeds are not sent)."""
        if not self.send_seed or seed is None:
            return None
        return seed % 2**32 if self.seed_mod_2_32 else seed

    def _headers(self) -> dict[str, str]:
        if not self.auth.key_is_set():
            raise ModelRequestError(
                f"environment variable {self.api_key_env} is unset or empty; export the API key "
                f"or set model.api_key_env: null for an endpoint without auth"
            )
        return {"Content-Type": "application/json", **self.auth.headers()}

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, *, seed: int | None
    ) -> ModelOutput:
        """Send one chat-completion request and return the validated output.

        Retries HTTP 408/409/429/500/502/503/504, transport errors and broken streams, with
        backoff, up to ``max_retries`` attempts in total. A 2xx body that is unusable is returned
        as an output carrying ``protocol_error`` (or ``policy_failure``), never retried.

        Raises:
            ModelRequestError: any other non-2xx status (at once), exhausted attempts, missing key.
        """
        headers = self._headers()
        client = self._http()
        content = self.encode_body(messages, tools, seed)
        offered = [
            t["function"]["name"] for t in tools or [] if isinstance(t, dict) and isinstance(t.get("function"), dict)
        ]
        started = time.perf_counter()
        last_error = ""
        faulted = False
        for attempt in range(self.max_retries):
            faulted = False
            try:
                if self.stream:
                    output = await self._attempt_stream(client, content, headers, offered)
                else:
                    output = await self._attempt_plain(client, content, headers, offered)
                output.latency_ms = round_ms((time.perf_counter() - started) * 1000.0)
                output.attempts = attempt + 1
                return output
            except _Retryable as exc:
                last_error = str(exc)
                faulted = isinstance(exc, _EndpointFaulted)
            except TransportError as exc:
                last_error = str(exc)
            except StreamFailure as exc:
                last_error = f"broken stream: {exc}"
            logger.warning("model attempt %d/%d failed: %s", attempt + 1, self.max_retries, last_error[:300])
            if attempt + 1 < self.max_retries:
                await self.sleep(backoff_delay(attempt, self.retry_backoff_seconds, self.rng.random()))
        if faulted:
            raise ModelEndpointFault(f"model endpoint fault after {self.max_retries} attempts: {last_error}")
        raise ModelRequestError(f"model request failed after {self.max_retries} attempts: {last_error}")

    def _fault(self, reply: Any) -> None:
        """Raise :class:`_EndpointFaulted` when a 2xx *reply* is no chat completion at all."""
        why = endpoint_fault(reply.data, reply.content_type)
        if why is not None:
            raise _EndpointFaulted(f"{self.url} answered HTTP {reply.status} with {why}")

    @staticmethod
    def _check_status(status: int, text: str) -> None:
        if 200 <= status < 300:
            return
        if status in RETRYABLE_STATUSES:
            raise _Retryable(f"retryable model HTTP {status}: {text[:500]}")
        raise ModelRequestError(f"non-retryable model HTTP {status}: {text[:500]}")

    async def _attempt_plain(
        self, client: Any, content: bytes, headers: dict[str, str], offered: list[str]
    ) -> ModelOutput:
        reply = await client.request("POST", self.url, content, headers)
        if not 200 <= reply.status < 300:
            self._check_status(reply.status, reply.text)
        body = fast_loads(reply.data)
        if body is UNDECODED or (type(body) is dict and "choices" not in body):
            self._fault(reply)  # only a body the fast path refused, or one without choices, needs a look
        if body is UNDECODED:  # not for msgspec: the stdlib decides, on the text, with its own error message
            text = reply.text
            try:
                body = loads_finite(text)  # NaN/Infinity refused too: a trace line cannot hold them
            except json.JSONDecodeError as exc:
                out = ModelOutput(body=None)
                out.protocol_error = {
                    "code": "invalid_json_response",
                    "message": f"model response is not valid JSON: {exc}",
                }
                out.raw_response = {"text": text[:4000]}
                return out
        return validate_completion(body, offered)

    async def _attempt_stream(
        self, client: Any, content: bytes, headers: dict[str, str], offered: list[str]
    ) -> ModelOutput:
        async with client.stream("POST", self.url, content, headers) as response:
            if not 200 <= response.status < 300:
                text = (await response.read()).decode("utf-8", errors="replace")
                self._check_status(response.status, text)
            mime = (response.content_type or "").split(";", 1)[0].strip().lower()
            if mime in ("text/html", "text/plain", "application/xhtml+xml"):  # an error page, not an event stream
                self._fault(Reply(response.status, await response.read(), None, response.content_type))
            assembler = StreamAssembler()
            # read to the end even after [DONE] so the connection goes back to the pool
            async for line in response.lines():
                assembler.feed_line(line)
        return validate_completion(assembler.body(), offered)

"""Token backends over HTTP: an OpenAI-compatible chat endpoint returning token ids (vLLM) and SGLang's ``/generate``.

- :class:`VLLMChatBackend` sends the evaluation's chat request — through the evaluation's own model client — plus
  ``logprobs: true`` and ``return_token_ids: true`` (vLLM's OpenAI server answers with ``prompt_token_ids`` and
  ``choices[0].token_ids``), so the chat template and the tool parser are the server's, exactly as in evaluation,
  and the body is the server's own answer.
  vLLM reports the logprobs of the raw model distribution unless it is started with ``--logprobs-mode
  processed_logprobs``; with a temperature other than 1 start it that way (docs/training.md#vllm).
- :class:`SGLangGenerateBackend` renders the prompt with the policy's tokenizer (:class:`ChatTemplate`), sends the
  ids to ``/generate`` with ``return_logprob: true`` (what slime's router serves) and reads
  ``meta_info.output_token_logprobs`` (``[logprob, token_id, text]`` per sampled token) and
  ``meta_info.finish_reason.type``.

The SGLang backend uses one pooled ``httpx.AsyncClient``; the key comes from the endpoint's :class:`EndpointAuth`.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from shopsimrl_core.training._chat_template import ChatTemplate, completion_body
from shopsimrl_core.training._tokens import SamplingSpec, TokenMismatch, TurnTokens

if TYPE_CHECKING:
    import httpx

    from shopsimrl_core.adapters._auth import EndpointAuth

__all__ = ["VLLMChatBackend", "SGLangGenerateBackend"]


def _client(timeout: float) -> httpx.AsyncClient:
    import httpx

    return httpx.AsyncClient(timeout=timeout, trust_env=False)


def _finite_float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TokenMismatch(f"logprob {value!r} is not a number")
    return float(value)


class VLLMChatBackend:
    """Exact tokens from an OpenAI-compatible chat endpoint that returns token ids and logprobs (vLLM).

    The requests are the evaluation's own: the ``model`` section's client (``ReplicatedChatModelClient``: the same
    body, seeds, auth, retries of runtime-semantics §7.2, HTTP engine and replicas) with the sampling of the
    training and ``logprobs`` / ``return_token_ids`` added to the body; the answer's token fields are read from the
    body it received. Streaming is off (the token ids come with the whole answer).
    """

    def __init__(self, model: Any, *, transport: Any = None, client_overrides: dict[str, Any] | None = None) -> None:
        self.model_config = model
        self.client_overrides = dict(client_overrides or {})
        """Client settings that differ from the section's (the preflight's probe: one attempt)."""
        self.base_url = str(model.base_url).rstrip("/")
        self.model = str(model.name)
        self._transport = transport
        self._client: Any = None
        self._sampling: SamplingSpec | None = None

    @classmethod
    def from_model_config(cls, model: Any, *, transport: Any = None) -> VLLMChatBackend:
        """The backend of an evaluation config's ``model`` section (a ``ModelConfig``)."""
        return cls(model, transport=transport)

    @property
    def identity(self) -> dict[str, Any]:
        """``{kind: vllm-chat, base_url, model}``."""
        return {"kind": "vllm-chat", "base_url": self.base_url, "model": self.model}

    async def _client_for(self, sampling: SamplingSpec) -> Any:
        if self._client is not None:
            if sampling != self._sampling:
                raise TokenMismatch(f"{self.base_url}: one backend samples with one setting; got {sampling} after "
                                    f"{self._sampling}")
            return self._client
        from shopsimrl_core.adapters._replicas import ReplicatedChatModelClient

        extra = {**dict(self.model_config.extra_body), "logprobs": True, "return_token_ids": True}
        client = ReplicatedChatModelClient.from_config(
            self.model_config, transport=self._transport, temperature=sampling.temperature, top_p=None,
            max_tokens=sampling.max_tokens, stream=False, extra_body=extra, **self.client_overrides)
        await client.__aenter__()
        self._client, self._sampling = client, sampling
        return client

    def sent_seed(self, seed: int | None) -> int | None:
        """The seed the client puts on the wire for *seed* (as the evaluation's client reports it)."""
        return self._client.sent_seed(seed) if self._client is not None else seed

    async def generate(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, *,
                       seed: int | None, sampling: SamplingSpec) -> tuple[dict[str, Any], TurnTokens]:
        """One chat completion with its prompt ids, sampled ids and their logprobs.

        Raises:
            TokenMismatch: the answer carries no token ids or no logprobs (the server is not vLLM, or too old).
            ModelRequestError: the endpoint failed as the evaluation's client reports it (runtime-semantics §7.2).
        """
        client = await self._client_for(sampling)
        output = await client.complete(messages, tools, seed=seed)
        body = output.body
        choices = body.get("choices") if isinstance(body, dict) else None
        choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
        prompt_ids = body.get("prompt_token_ids") if isinstance(body, dict) else None
        output_ids = choice.get("token_ids")
        if not isinstance(prompt_ids, list) or not isinstance(output_ids, list):
            raise TokenMismatch(f"{self.base_url}: the chat answer has no prompt_token_ids / token_ids; exact "
                                "tokens need vLLM's return_token_ids (vLLM >= 0.10.2)")
        content = (choice.get("logprobs") or {}).get("content")
        if not isinstance(content, list):
            raise TokenMismatch(f"{self.base_url}: the chat answer has no logprobs.content; the server must "
                                "return logprobs (logprobs: true)")
        logprobs = [_finite_float(entry.get("logprob") if isinstance(entry, dict) else None) for entry in content]
        tokens = TurnTokens(prompt_ids=prompt_ids, output_ids=output_ids, output_logprobs=logprobs,
                            finish_reason=choice.get("finish_reason"))
        return body, tokens

    async def aclose(self) -> None:
        """Close the client's pooled connections."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None


class SGLangGenerateBackend:
    """Exact tokens from SGLang's native ``/generate`` (slime's router), prompt rendered with the policy's tokenizer."""

    def __init__(self, base_url: str, template: ChatTemplate, *, model: str = "policy",
                 auth: EndpointAuth | None = None, timeout: float = 300.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.template = template
        self.model = model
        self.auth = auth
        self._http = _client(timeout)
        self._turns = 0

    @property
    def identity(self) -> dict[str, Any]:
        """``{kind: sglang-generate, base_url, model}``."""
        return {"kind": "sglang-generate", "base_url": self.base_url, "model": self.model}

    def request_body(self, prompt_ids: list[int], *, seed: int | None, sampling: SamplingSpec) -> dict[str, Any]:
        """The ``/generate`` body: the ids, untruncated sampling, logprobs of the sampled tokens."""
        params: dict[str, Any] = {"temperature": sampling.temperature, "top_p": 1.0, "top_k": -1,
                                  "max_new_tokens": sampling.max_tokens, "skip_special_tokens": False}
        if seed is not None:
            params["sampling_seed"] = seed
        return {"input_ids": prompt_ids, "sampling_params": params, "return_logprob": True}

    async def generate(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, *,
                       seed: int | None, sampling: SamplingSpec) -> tuple[dict[str, Any], TurnTokens]:
        """One ``/generate`` call; the sampled text parsed into a chat-completion body.

        Raises:
            TokenMismatch: no ``output_token_logprobs``, or ids that disagree with ``output_ids``.
            httpx.HTTPError: transport trouble or a non-2xx status.
        """
        prompt_ids = self.template.render(messages, tools)
        headers = self.auth.headers() if self.auth is not None else {}
        reply = await self._http.post(f"{self.base_url}/generate",
                                      json=self.request_body(prompt_ids, seed=seed, sampling=sampling),
                                      headers=headers)
        reply.raise_for_status()
        answer = reply.json()
        meta = answer.get("meta_info") if isinstance(answer, dict) else None
        pairs = meta.get("output_token_logprobs") if isinstance(meta, dict) else None
        if not isinstance(pairs, list):
            raise TokenMismatch(f"{self.base_url}: /generate answered without meta_info.output_token_logprobs; "
                                "send return_logprob: true to an SGLang server")
        output_ids = [int(p[1]) for p in pairs]
        logprobs = [_finite_float(p[0]) for p in pairs]
        listed = answer.get("output_ids")
        if isinstance(listed, list) and [int(t) for t in listed] != output_ids:
            raise TokenMismatch(f"{self.base_url}: output_ids and output_token_logprobs name different tokens")
        finish = (meta.get("finish_reason") or {}) if isinstance(meta, dict) else {}
        finish_type = finish.get("type") if isinstance(finish, dict) else finish
        self._turns += 1
        message = self.template.parse(output_ids, f"call-{uuid.uuid4().hex[:12]}")
        body = completion_body(message, "length" if finish_type == "length" else "stop",
                               response_id=f"sglang-{uuid.uuid4().hex[:16]}", prompt_tokens=len(prompt_ids),
                               completion_tokens=len(output_ids))
        tokens = TurnTokens(prompt_ids=prompt_ids, output_ids=output_ids, output_logprobs=logprobs,
                            finish_reason=str(finish_type) if finish_type is not None else None)
        return body, tokens

    async def aclose(self) -> None:
        """Close the pooled connections."""
        await self._http.aclose()

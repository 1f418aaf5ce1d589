"""Exact tokens of one model turn, the sampling they came from, and the protocol every token backend follows.

A training episode trains on what the serving engine sampled, never on a re-tokenization of the text: per model turn
the backend returns the prompt token ids the engine saw, the sampled token ids, one log-probability per sampled
token under the distribution it sampled from, and the finish reason — beside an OpenAI chat-completion body that
the evaluation's own ``validate_completion`` checks. Three implementations: SGLang's native ``/generate``
(``_backends.SGLangGenerateBackend``), an OpenAI-compatible chat endpoint returning token ids (vLLM,
``_backends.VLLMChatBackend``) and in-process transformers generation (``_inprocess.TransformersBackend``).

The sampled distribution must be the one trained on: nucleus (``top_p`` < 1) or top-k truncation changes it, and
none of the backends here returns the kept set a trainer would need to replay it, so both are refused with exact
tokens (:func:`check_exact_sampling`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol

from shopsimrl_core._errors import ConfigError, InferenceError

__all__ = [
    "SamplingSpec",
    "TurnTokens",
    "TokenBackend",
    "TokenMismatch",
    "check_exact_sampling",
    "check_turn_tokens",
]


class TokenMismatch(InferenceError):
    """A backend's token answer cannot be trained on exactly (no logprobs, lengths differ, non-finite values)."""

    code = "exact-tokens-broken"


@dataclass(frozen=True)
class SamplingSpec:
    """What the trainer's policy samples with; recorded in every episode's training block."""

    temperature: float = 1.0
    """Softmax temperature (> 0: greedy decoding has no sampling distribution to train on)."""
    top_p: float = 1.0
    """Nucleus mass; anything but 1 is refused with exact tokens (the kept set cannot be replayed here)."""
    top_k: int | None = None
    """Top-k truncation; None, 0 or -1 mean off, anything else is refused with exact tokens."""
    max_tokens: int = 512
    """Sampled tokens per model turn (the turn ends with ``finish_reason: length`` past it)."""

    def to_dict(self) -> dict[str, Any]:
        """The block stored in the trace's training block."""
        return {"temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k,
                "max_tokens": self.max_tokens}


def check_exact_sampling(spec: SamplingSpec, source: str = "sampling") -> None:
    """Refuse sampling settings whose distribution the trainer could not replay.

    Raises:
        ConfigError (``exact-tokens-sampling``): ``top_p`` != 1, a ``top_k`` truncation, a temperature <= 0
            or not finite, or ``max_tokens`` < 1.
    """
    if spec.top_p != 1.0:
        raise ConfigError(f"{source}.top_p: must be 1 with exact tokens (got {spec.top_p}); the backends here "
                          "return no kept top-p set for the trainer to replay — set top_p: 1",
                          code="exact-tokens-sampling")
    if spec.top_k not in (None, 0, -1):
        raise ConfigError(f"{source}.top_k: must be off (null, 0 or -1) with exact tokens (got {spec.top_k}); a "
                          "truncated distribution is not the one the trainer recomputes — remove top_k",
                          code="exact-tokens-sampling")
    if not (math.isfinite(spec.temperature) and spec.temperature > 0):
        raise ConfigError(f"{source}.temperature: must be > 0 with exact tokens (got {spec.temperature}); greedy "
                          "decoding has no sampling distribution to train on", code="exact-tokens-sampling")
    if spec.max_tokens < 1:
        raise ConfigError(f"{source}.max_tokens: must be >= 1 (got {spec.max_tokens})", code="exact-tokens-sampling")


@dataclass
class TurnTokens:
    """One model turn exactly as the engine saw and sampled it."""

    prompt_ids: list[int]
    """The prompt token ids the engine generated from (chat template applied, generation prompt included)."""
    output_ids: list[int]
    """The sampled token ids, end-of-turn token included when the engine sampled it."""
    output_logprobs: list[float]
    """One log-probability per sampled token, under the distribution it was sampled from."""
    finish_reason: str | None
    step_index: int = 0
    """The model turn (1-based ``step_index`` of the trace); set by the recorder."""
    extra: dict[str, Any] = field(default_factory=dict)


def check_turn_tokens(turn: TurnTokens, source: str) -> None:
    """Refuse a turn that cannot be trained on exactly.

    Raises:
        TokenMismatch: no logprobs, one count for ids and another for logprobs, a non-finite or positive
            logprob, an empty prompt, or non-integer ids.
    """
    if not turn.prompt_ids:
        raise TokenMismatch(f"{source}: the backend returned no prompt token ids; exact tokens need them "
                            "(vLLM: return_token_ids: true; SGLang: input_ids are sent by us)")
    if turn.output_ids and not turn.output_logprobs:
        raise TokenMismatch(f"{source}: the backend returned no logprobs for {len(turn.output_ids)} sampled "
                            "tokens; enable them (vLLM: logprobs: true; SGLang: return_logprob: true)")
    if len(turn.output_logprobs) != len(turn.output_ids):
        raise TokenMismatch(f"{source}: {len(turn.output_ids)} sampled tokens but {len(turn.output_logprobs)} "
                            "logprobs; the backend's answer is not exact")
    for position, value in enumerate(turn.output_logprobs):
        if not (isinstance(value, (int, float)) and math.isfinite(value)) or value > 1e-6:
            raise TokenMismatch(f"{source}: logprob {value!r} of sampled token {position} is not a finite "
                                "log-probability; the sample cannot be trained on")
    # the sampled ids are what is trained on: each is checked; prompt ids (thousands per turn, from a JSON decoder
    # or a tokenizer) are checked at their ends only
    probe = turn.output_ids + turn.prompt_ids[:1] + turn.prompt_ids[-1:]
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in probe):
        raise TokenMismatch(f"{source}: token ids must be integers")


class TokenBackend(Protocol):
    """One model turn with exact tokens: ``(chat-completion body, TurnTokens)`` for messages and tools."""

    @property
    def identity(self) -> dict[str, Any]:
        """``{"kind": ..., ...}``: what served the tokens (stored in every training block)."""
        ...

    async def generate(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        *,
        seed: int | None,
        sampling: SamplingSpec,
    ) -> tuple[dict[str, Any], TurnTokens]:
        """Sample one assistant turn; the body is checked by ``validate_completion`` like any evaluation answer."""
        ...

    async def aclose(self) -> None:
        """Release connections (and models) the backend holds."""
        ...

"""The chat model a training episode plays with: a token backend whose answers the evaluation's checks judge.

:class:`TokenRecordingModel` has the one method the episode runtime calls on a model (``complete(messages, tools,
*, seed) -> ModelOutput``), so a training episode is ``run_episode`` itself — the same prompt, tools, validation,
protocol feedback, leases, reward and termination — and the only difference is what the model keeps on the side:
the exact tokens of every turn.
"""

from __future__ import annotations

import time
from typing import Any

from shopsimrl_core._clock import round_ms
from shopsimrl_core.adapters._validation import ModelOutput, validate_completion
from shopsimrl_core.training._tokens import SamplingSpec, TokenBackend, TurnTokens, check_turn_tokens

__all__ = ["TokenRecordingModel"]


class TokenRecordingModel:
    """One episode's model: asks *backend* for each turn, validates the body, keeps the turn's tokens.

    Use one per episode (``turns`` are that episode's). A backend answer without exact tokens raises
    :class:`~shopsimrl_core.training._tokens.TokenMismatch`, which the runtime records as the episode's failure.
    """

    def __init__(self, backend: TokenBackend, sampling: SamplingSpec, *, label: str = "episode") -> None:
        self.backend = backend
        self.sampling = sampling
        self.label = label
        self.turns: list[TurnTokens] = []
        forward = getattr(backend, "sent_seed", None)
        if callable(forward):
            self.sent_seed = forward  # the trace's request_seed is what went on the wire, as in evaluation

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, *,
                       seed: int | None) -> ModelOutput:
        """One model turn: the backend's body validated as in evaluation (runtime-semantics §7.3), tokens kept."""
        started = time.perf_counter()
        step_index = len(self.turns) + 1
        body, tokens = await self.backend.generate(list(messages), tools, seed=seed, sampling=self.sampling)
        check_turn_tokens(tokens, f"{self.label}: model turn {step_index}")
        tokens.step_index = step_index
        self.turns.append(tokens)
        offered = [tool["function"]["name"] for tool in tools or []]
        output = validate_completion(body, offered)
        output.latency_ms = round_ms((time.perf_counter() - started) * 1000.0)
        return output

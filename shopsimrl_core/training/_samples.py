"""Token samples: the contiguous sequences a trainer trains on, built from the turns of one episode.

A sample starts with a turn's prompt ids (never trained on) followed by its sampled ids (loss mask 1, rollout
logprobs kept). The next turn joins the same sample when its prompt ids *extend* everything so far: the extension
(the end-of-turn text, the tool or user message that answered, the next generation prompt) enters with mask 0 and
logprob 0, then its sampled ids with mask 1. When a turn's prompt does not extend the previous tokens — the chat
template rendered the history differently from what was sampled, e.g. a template that drops earlier reasoning, or
a text that re-tokenizes differently — a new sample starts at that turn. Nothing is re-aligned: every sampled token
appears in exactly one sample, with its own logprob, and is trained on once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from shopsimrl_core.training._tokens import TurnTokens

__all__ = ["TokenSample", "build_samples", "placeholder_sample"]


@dataclass
class TokenSample:
    """One contiguous token sequence: prompt (mask 0) + response (sampled tokens mask 1, the rest mask 0)."""

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    """One entry per response token: 1 on sampled tokens, 0 on system/user/tool/observation tokens."""
    rollout_logprobs: list[float] = field(default_factory=list)
    """One entry per response token: the engine's logprob on sampled tokens, 0.0 elsewhere."""
    turn_indices: list[int] = field(default_factory=list)
    reason: str = "first_turn"
    """Why the sample starts where it does: ``first_turn``, ``template_drift`` or ``aborted``."""

    @property
    def tokens(self) -> list[int]:
        """The whole sequence: prompt then response."""
        return self.prompt_ids + self.response_ids

    @property
    def sampled_count(self) -> int:
        """Tokens trained on (mask 1)."""
        return sum(self.loss_mask)

    def sampled_ids(self) -> list[int]:
        """The masked-in tokens, in order (decoded, they are the sample's assistant turns)."""
        return [token for token, keep in zip(self.response_ids, self.loss_mask) if keep]

    def _add(self, ids: Sequence[int], logprobs: Sequence[float] | None) -> None:
        self.response_ids.extend(ids)
        if logprobs is None:
            self.loss_mask.extend([0] * len(ids))
            self.rollout_logprobs.extend([0.0] * len(ids))
        else:
            self.loss_mask.extend([1] * len(ids))
            self.rollout_logprobs.extend(float(v) for v in logprobs)


def build_samples(turns: Sequence[TurnTokens]) -> list[TokenSample]:
    """The samples of an episode's turns (in order); a turn whose prompt does not extend the tokens so far forks.

    Promises: every sampled token of every turn is in exactly one sample with mask 1 and its own logprob;
    ``len(loss_mask) == len(rollout_logprobs) == len(response_ids)`` in every sample.
    """
    samples: list[TokenSample] = []
    current: TokenSample | None = None
    for turn in turns:
        if current is not None:
            so_far = current.tokens
            if len(turn.prompt_ids) >= len(so_far) and turn.prompt_ids[: len(so_far)] == so_far:
                current._add(turn.prompt_ids[len(so_far):], None)
                current._add(turn.output_ids, turn.output_logprobs)
                current.turn_indices.append(turn.step_index)
                continue
        current = TokenSample(prompt_ids=list(turn.prompt_ids),
                              reason="first_turn" if current is None else "template_drift")
        current._add(turn.output_ids, turn.output_logprobs)
        current.turn_indices.append(turn.step_index)
        samples.append(current)
    return samples


def placeholder_sample(turns: Sequence[TurnTokens]) -> TokenSample:
    """The zero-loss sample of an aborted episode: its first prompt (if any), nothing trained on.

    Keeps the group's shape (one sample per episode) while contributing no gradient: every mask entry is 0.
    """
    if not turns:
        return TokenSample(prompt_ids=[], reason="aborted")
    first = turns[0]
    sample = TokenSample(prompt_ids=list(first.prompt_ids), reason="aborted")
    sample._add(first.output_ids, None)
    sample.turn_indices.append(first.step_index)
    return sample

"""Token samples from turns: extension joins a sample, drift starts a new one, nothing is trained on twice."""

from __future__ import annotations

import math

import pytest

from shopsimrl_core._errors import ConfigError
from shopsimrl_core.training import SamplingSpec, TokenMismatch, TurnTokens, build_samples, check_exact_sampling
from shopsimrl_core.training._samples import placeholder_sample
from shopsimrl_core.training._tokens import check_turn_tokens


def _turn(step: int, prompt: list[int], output: list[int]) -> TurnTokens:
    logprobs = [-0.1 * (i + 1) for i in range(len(output))]
    return TurnTokens(prompt_ids=prompt, output_ids=output, output_logprobs=logprobs, finish_reason="stop",
                      step_index=step)


def _sampled(samples: list) -> list[tuple[int, float]]:
    return [(t, lp) for s in samples for t, m, lp in zip(s.response_ids, s.loss_mask, s.rollout_logprobs) if m]


def test_turns_that_extend_share_one_sample_with_observation_tokens_masked_out() -> None:
    first = _turn(1, [1, 2, 3], [10, 11])
    second = _turn(2, [1, 2, 3, 10, 11, 90, 91, 92], [12])  # 90-92: the tool answer and the next generation prompt
    third = _turn(3, [1, 2, 3, 10, 11, 90, 91, 92, 12, 93], [13, 14])
    [sample] = build_samples([first, second, third])
    assert sample.prompt_ids == [1, 2, 3]
    assert sample.response_ids == [10, 11, 90, 91, 92, 12, 93, 13, 14]
    assert sample.loss_mask == [1, 1, 0, 0, 0, 1, 0, 1, 1]
    assert sample.rollout_logprobs[2:5] == [0.0, 0.0, 0.0] and sample.rollout_logprobs[5] == pytest.approx(-0.1)
    assert sample.turn_indices == [1, 2, 3] and sample.reason == "first_turn"
    assert sample.sampled_ids() == [10, 11, 12, 13, 14]


def test_a_prompt_that_does_not_extend_starts_a_new_sample_and_keeps_every_logprob_once() -> None:
    first = _turn(1, [1, 2, 3], [50, 51, 10, 11])  # 50, 51: reasoning the template drops later
    second = _turn(2, [1, 2, 3, 10, 11, 90], [12, 13])
    third = _turn(3, [1, 2, 3, 10, 11, 90, 12, 13, 91], [14])
    samples = build_samples([first, second, third])
    assert [s.reason for s in samples] == ["first_turn", "template_drift"]
    assert samples[1].prompt_ids == [1, 2, 3, 10, 11, 90] and samples[1].turn_indices == [2, 3]
    every = [(t, lp) for turn in (first, second, third) for t, lp in zip(turn.output_ids, turn.output_logprobs)]
    assert _sampled(samples) == every  # each sampled token exactly once, with its own logprob
    for sample in samples:
        assert len(sample.loss_mask) == len(sample.rollout_logprobs) == len(sample.response_ids)


def test_an_aborted_episode_is_one_zero_loss_placeholder() -> None:
    sample = placeholder_sample([_turn(1, [1, 2], [3, 4])])
    assert sample.reason == "aborted" and sample.prompt_ids == [1, 2] and sample.loss_mask == [0, 0]
    assert placeholder_sample([]).tokens == []


@pytest.mark.parametrize(("spec", "field"), [
    (SamplingSpec(top_p=0.9), "top_p"),
    (SamplingSpec(top_k=50), "top_k"),
    (SamplingSpec(temperature=0.0), "temperature"),
])
def test_sampling_the_trainer_cannot_replay_is_refused_in_one_line(spec: SamplingSpec, field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_exact_sampling(spec)
    assert f"sampling.{field}:" in str(caught.value) and "\n" not in str(caught.value)
    assert caught.value.code == "exact-tokens-sampling"
    check_exact_sampling(SamplingSpec(top_k=-1))  # off is fine


@pytest.mark.parametrize(("turn", "says"), [
    (TurnTokens([1], [5, 6], [], "stop"), "no logprobs"),
    (TurnTokens([1], [5, 6], [-0.1], "stop"), "2 sampled tokens but 1 logprobs"),
    (TurnTokens([1], [5], [math.nan], "stop"), "not a finite"),
    (TurnTokens([1], [5], [math.inf], "stop"), "not a finite"),
    (TurnTokens([], [5], [-0.1], "stop"), "no prompt token ids"),
])
def test_token_answers_that_are_not_exact_are_refused(turn: TurnTokens, says: str) -> None:
    with pytest.raises(TokenMismatch, match=says):
        check_turn_tokens(turn, "turn 1")

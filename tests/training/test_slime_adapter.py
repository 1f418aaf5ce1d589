"""The slime adapter's output against a stand-in of slime's ``Sample`` (issue 30, acceptance 5).

slime itself is not installed here (nor can it run without GPUs): the stand-in below declares, from slime's
public source (slime/utils/types.py), only the facts the adapter relies on — the ``Sample`` fields its loss and
data path read and the ``Sample.Status`` values. The recorded episode is real: ``generate`` plays it through
``TrainingSession`` against the sandbox environment and policy (vLLM-shaped exact tokens).
"""

from __future__ import annotations

import asyncio
import json
from argparse import Namespace
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
from testkit.training_sandbox import training_config, write_split_subset

from shopsimrl_core._errors import ConfigError
from shopsimrl_core.training._samples import build_samples, placeholder_sample
from shopsimrl_core.training._session import TrainingEpisode
from shopsimrl_core.training._tokens import TurnTokens
from shopsimrl_core.training.adapters import slime

NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}


@dataclass
class StandInSample:
    """slime's ``Sample`` as far as the adapter and slime's training data path use it (fields and status values)."""

    group_index: int | None = None
    index: int | None = None
    rollout_id: int | None = None
    prompt: str | list[dict[str, str]] = ""
    tokens: list[int] = field(default_factory=list)
    response: str = ""
    response_length: int = 0
    label: str | None = None
    reward: float | dict[str, Any] | None = None
    loss_mask: list[int] | None = None
    rollout_log_probs: list[float] | None = None
    remove_sample: bool = False

    class Status(Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    status: Status = Status.PENDING
    metadata: dict[str, Any] = field(default_factory=dict)


def _slime_line(task_id: int, group_index: int, index: int) -> StandInSample:
    """A sample as slime's data source makes it from an export_slime_tasks line."""
    return StandInSample(group_index=group_index, index=index, prompt=str(task_id),
                         metadata={"schema_version": "shopsimrl-slime-tasks-v1", "task_id": task_id, "split": "train"})


def _check_consistent(sample: StandInSample) -> None:
    """What slime's loss needs, consistent with itself."""
    assert sample.response_length >= 1
    assert sample.loss_mask is not None and sample.rollout_log_probs is not None
    assert len(sample.loss_mask) == len(sample.rollout_log_probs) == sample.response_length
    assert len(sample.tokens) > sample.response_length
    assert set(sample.loss_mask) <= {0, 1}
    assert isinstance(sample.reward, float)
    assert isinstance(sample.status, StandInSample.Status)


@pytest.mark.slow
def test_a_recorded_group_becomes_samples_with_the_sidecar_tokens(tmp_path: Path, sandbox: Any) -> None:
    split = write_split_subset(tmp_path, Path(sandbox.split_file), {"train": 3})
    task_id = json.loads(split.read_text(encoding="utf-8"))["splits"]["train"]["task_ids"][0]
    config = training_config(tmp_path, split_file=split, env_url=sandbox.env_url, policy_url=sandbox.policy_url,
                             model=sandbox.served_model, extra_body=NO_THINKING)
    out = tmp_path / "train"
    args = Namespace(shopsimrl_config=str(config), shopsimrl_out_dir=str(out), shopsimrl_backend="vllm-chat",
                     n_samples_per_prompt=2)
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 256, "no_stop_trim": True}
    gate = asyncio.Semaphore(1)  # slime holds its generation semaphore while the custom function runs

    async def one(sample: StandInSample) -> Any:
        async with gate:
            return await slime.generate(args, sample, dict(params))

    async def go() -> list[Any]:
        try:
            # group 5 of slime's numbering: indexes 10 and 11 are samples 0 and 1 of the group
            return list(await asyncio.gather(one(_slime_line(task_id, 5, 11)), one(_slime_line(task_id, 5, 10))))
        finally:
            await slime.close_sessions()

    results = asyncio.run(go())
    sidecar = [json.loads(line) for line in (out / "samples.jsonl").read_text(encoding="utf-8").splitlines()]
    records = {json.loads(line)["episode_id"]: json.loads(line)
               for line in (out / "traces.jsonl").read_text(encoding="utf-8").splitlines()}
    assert len(records) == 2 and len(sidecar) >= 2
    for result in results:
        samples = result if isinstance(result, list) else [result]
        for sample in samples:
            _check_consistent(sample)
            info = sample.metadata["shopsimrl"]
            assert sample.metadata["task_id"] == task_id  # slime's own metadata is kept
            line = next(s for s in sidecar if s["episode_id"] == info["episode_id"]
                        and s["sample_index"] == info["token_sample"])
            assert sample.tokens == line["prompt_ids"] + line["response_ids"]
            assert sample.response_length == len(line["response_ids"])
            assert sample.loss_mask == line["loss_mask"] and sample.rollout_log_probs == line["rollout_logprobs"]
            assert sum(sample.loss_mask) > 0 and not sample.remove_sample
            record = records[info["episode_id"]]
            assert record["status"] == "completed"
            assert sample.reward == float(record["final"]["reward"])
            assert sample.status in (StandInSample.Status.COMPLETED, StandInSample.Status.TRUNCATED)
            assert info["group_key"] == str(task_id)
    firsts = [r[0] if isinstance(r, list) else r for r in results]
    assert sorted(r.metadata["shopsimrl"]["sample_in_group"] for r in firsts) == [0, 1]
    # the group completed at its last finisher although only one call could run at a time
    assert (out / "triage" / f"{task_id}.json").is_file()


@pytest.mark.slow
def test_an_aborted_episode_is_one_zero_loss_placeholder(tmp_path: Path, sandbox: Any) -> None:
    split = write_split_subset(tmp_path, Path(sandbox.split_file), {"train": 2})
    task_id = json.loads(split.read_text(encoding="utf-8"))["splits"]["train"]["task_ids"][0]
    dead = "http://127.0.0.1:9"  # discard port: nothing listens, every reset fails
    config = training_config(tmp_path, split_file=split, env_url=dead, policy_url=sandbox.policy_url,
                             model=sandbox.served_model, extra_body=NO_THINKING)
    args = Namespace(shopsimrl_config=str(config), shopsimrl_out_dir=str(tmp_path / "train"),
                     shopsimrl_backend="vllm-chat", n_samples_per_prompt=1)

    async def go() -> Any:
        try:
            return await slime.generate(args, _slime_line(task_id, 0, 0), {"temperature": 1.0, "max_new_tokens": 64})
        finally:
            await slime.close_sessions()

    sample = asyncio.run(go())
    assert not isinstance(sample, list)
    _check_consistent(sample)
    assert sample.status is StandInSample.Status.FAILED and sample.remove_sample
    assert sample.loss_mask == [0] * sample.response_length and set(sample.rollout_log_probs) == {0.0}
    assert sample.reward == 0.0 and sample.metadata["shopsimrl"]["aborted"] is True


def _turn(prompt: list[int], out: list[int], step: int) -> TurnTokens:
    return TurnTokens(prompt_ids=prompt, output_ids=out, output_logprobs=[-0.5] * len(out), finish_reason="stop",
                      step_index=step)


def _episode(samples: list[Any], *, aborted: bool, reward: float = 1.0) -> TrainingEpisode:
    record = {"episode_id": "task-000007__sample-000", "status": "failed" if aborted else "completed",
              "steps": [{"step_index": 1, "action": "search[红色 连衣裙]"},
                        {"step_index": 2, "action": "click[buy now]"}]}
    return TrainingEpisode(record=record, samples=samples, reward=0.0 if aborted else reward, success=not aborted,
                           aborted=aborted, task_id=7, sample_index=0, group_key="7", assignment={"mode": "none"})


def test_a_drifted_episode_fans_out_into_samples_sharing_one_rollout_id() -> None:
    # the second turn's prompt does not extend the first turn's tokens: a new sample starts there
    turns = [_turn([1, 2, 3], [10, 11], 1), _turn([1, 2, 9, 4], [12, 13, 14], 2)]
    samples = build_samples(turns)
    assert len(samples) == 2
    result = slime.to_slime_samples(_episode(samples, aborted=False), _slime_line(7, 3, 6))
    assert isinstance(result, list) and len(result) == 2
    assert [s.tokens for s in result] == [[1, 2, 3, 10, 11], [1, 2, 9, 4, 12, 13, 14]]
    assert [s.loss_mask for s in result] == [[1, 1], [1, 1, 1]]
    assert {s.rollout_id for s in result} == {6} and all(s.reward == 1.0 for s in result)
    assert [s.response for s in result] == ["search[红色 连衣裙]", "click[buy now]"]
    for sample in result:
        _check_consistent(sample)
        assert sample.status is StandInSample.Status.COMPLETED


def test_a_placeholder_keeps_the_first_prompt_and_trains_on_nothing() -> None:
    placeholder = placeholder_sample([_turn([1, 2, 3], [10, 11], 1)])
    sample = slime.to_slime_samples(_episode([placeholder], aborted=True), _slime_line(7, 0, 0))
    _check_consistent(sample)
    assert sample.tokens == [1, 2, 3, 10, 11] and sample.loss_mask == [0, 0]
    assert sample.status is StandInSample.Status.FAILED and sample.remove_sample and sample.reward == 0.0


def test_eval_datasets_and_samples_without_a_task_are_refused() -> None:
    with pytest.raises(ConfigError, match="shopsimrl run"):
        asyncio.run(slime.generate(Namespace(), _slime_line(7, 0, 0), {}, evaluation=True))
    with pytest.raises(ConfigError, match="export_slime_tasks"):
        slime.task_id_of(StandInSample(prompt="find me a dress"))

"""The TRL adapter's rollout function without torch: TRL's contract filled from real training episodes.

``TRLRollout`` is called as ``GRPOTrainer`` calls it (``rollout_func(prompts, trainer)``, prompts repeated
``num_generations`` times in a row) with the sandbox policy's vLLM-shaped exact tokens as backend, so the rows,
the env mask and the refusals are checked in the default suite; the real trainer runs in `make test-training`
(tests/training_trl/test_grpo_cpu.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from testkit.training_sandbox import training_config, write_split_subset

from shopsimrl_core._errors import ConfigError
from shopsimrl_core.training import SamplingSpec, TokenSample, VLLMChatBackend
from shopsimrl_core.training._session import TrainingEpisode
from shopsimrl_core.training.adapters.trl import TRLRollout, environment_reward, task_prompt

NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}


def trainer(num_generations: int, temperature: float = 1.0) -> Any:
    """The attributes of a GRPOTrainer the rollout function reads."""
    return SimpleNamespace(num_generations=num_generations, temperature=temperature, args=SimpleNamespace(),
                           model=None, accelerator=SimpleNamespace(unwrap_model=lambda model: model),
                           processing_class=SimpleNamespace(pad_token_id=0, eos_token_id=0))


def config(tmp_path: Path, sandbox: Any) -> Path:
    split = write_split_subset(tmp_path, Path(sandbox.split_file), {"train": 2})
    return training_config(tmp_path, split_file=split, env_url=sandbox.env_url, policy_url=sandbox.policy_url,
                           model=sandbox.served_model, extra_body=NO_THINKING)


def backend_for(path: Path) -> VLLMChatBackend:
    from shopsimrl_core.runs.config._config import load_config

    return VLLMChatBackend.from_model_config(load_config(path).model)


def test_rollout_rows_are_the_episodes_token_samples_with_the_env_mask(tmp_path: Path, sandbox: Any) -> None:
    path = config(tmp_path, sandbox)
    with TRLRollout(path, out_dir=tmp_path / "trl", backend=backend_for(path), group_size=2) as rollout:
        dataset_tasks = rollout._tasks()  # what rollout.dataset() lists (datasets is TRL's, not in this venv)
        assert len(dataset_tasks) == 2
        prompts = [task_prompt(t) for t in dataset_tasks for _ in range(2)]
        output = rollout(prompts, trainer(2))

    assert set(output) == {"prompt_ids", "completion_ids", "logprobs", "env_mask", "shopsim_reward",
                           "shopsim_episode_id", "shopsim_group_key", "shopsim_untrained_tokens"}
    assert all(len(values) == 4 for values in output.values())
    episodes = rollout.episodes
    assert [e.task_id for e in episodes] == [t for t in dataset_tasks for _ in range(2)]
    assert [e.group_key for e in episodes] == [str(t) for t in dataset_tasks for _ in range(2)]
    assert len({e.episode_id for e in episodes}) == 4 and not any(e.aborted for e in episodes)
    sidecar = [json.loads(line) for line in (tmp_path / "trl" / "samples.jsonl").read_text().splitlines()]
    for row, episode in enumerate(episodes):
        first = episode.samples[0]
        assert output["prompt_ids"][row] == first.prompt_ids
        assert output["completion_ids"][row] == first.response_ids
        assert output["env_mask"][row] == first.loss_mask and sum(first.loss_mask) > 0
        assert output["logprobs"][row] == first.rollout_logprobs
        assert all(v == 0.0 for v, m in zip(output["logprobs"][row], output["env_mask"][row]) if not m)
        assert output["shopsim_reward"][row] == episode.reward == episode.record["final"]["reward"]
        assert output["shopsim_untrained_tokens"][row] == sum(s.sampled_count for s in episode.samples[1:])
        line = next(s for s in sidecar if s["episode_id"] == episode.episode_id and s["sample_index"] == 0)
        assert line["response_ids"] == output["completion_ids"][row] and line["loss_mask"] == output["env_mask"][row]
        assert episode.record["training"]["adapter"] == "trl"
    assert environment_reward([None] * 4, output["shopsim_reward"]) == output["shopsim_reward"]


def test_rollout_refusals_are_one_line_and_play_nothing(tmp_path: Path, sandbox: Any) -> None:
    path = config(tmp_path, sandbox)
    task = sorted(TRLRollout(path, out_dir=tmp_path / "unused")._tasks())[0]
    cases = [
        (dict(group_size=4), [task_prompt(task)] * 2, trainer(2), "group-size-mismatch"),  # num_generations != group
        (dict(), [task_prompt(task)] * 3, trainer(2), "group-size-mismatch"),  # not whole groups
        (dict(), [task_prompt(task), task_prompt(task + 1)], trainer(2), "group-size-mismatch"),  # mixed group
        (dict(), ["What is 2 + 2?"] * 2, trainer(2), "config-invalid"),  # not a task of the dataset
        (dict(sampling=SamplingSpec(temperature=0.7)), [task_prompt(task)] * 2, trainer(2, 1.0),
         "exact-tokens-sampling"),  # TRL would recompute at another temperature
    ]
    evaluating = trainer(2)
    evaluating.model = SimpleNamespace(training=False)  # TRL's evaluation loop: val/test go through `shopsimrl run`
    cases.append((dict(), [task_prompt(task)] * 2, evaluating, "training-guarded-split"))
    for kwargs, prompts, fake, code in cases:
        out = tmp_path / f"trl-{code}-{len(prompts)}"
        with TRLRollout(path, out_dir=out, backend=backend_for(path), **kwargs) as rollout:
            with pytest.raises(ConfigError) as caught:
                rollout(prompts, fake)
        assert caught.value.code == code and "\n" not in str(caught.value), (code, str(caught.value))
        assert rollout.episodes == [] and not (out / "traces.jsonl").exists()


def _episode(samples: list[TokenSample], *, aborted: bool = False) -> TrainingEpisode:
    return TrainingEpisode(record={"episode_id": "task-000001__sample-000"}, samples=samples, reward=0.5,
                           success=False, aborted=aborted, task_id=1, sample_index=0, group_key="1", assignment={})


def test_aborted_drifted_and_empty_episodes_become_rows_that_keep_the_group_shape() -> None:
    rollout = TRLRollout("unused.yaml", out_dir="unused")
    first = TokenSample(prompt_ids=[1, 2], response_ids=[3, 4, 5], loss_mask=[1, 0, 1],
                        rollout_logprobs=[-0.5, 0.0, -0.25], turn_indices=[1, 2])
    forked = TokenSample(prompt_ids=[1, 9], response_ids=[6, 7], loss_mask=[1, 1], rollout_logprobs=[-1.0, -2.0],
                         turn_indices=[3], reason="template_drift")
    aborted = TokenSample(prompt_ids=[1, 2], response_ids=[3], loss_mask=[0], rollout_logprobs=[0.0],
                          turn_indices=[1], reason="aborted")
    empty = TokenSample(prompt_ids=[], reason="aborted")
    rows = rollout._rows([_episode([first, forked]), _episode([aborted], aborted=True),
                          _episode([empty], aborted=True)], trainer(3))
    assert rows["completion_ids"] == [[3, 4, 5], [3], [0]]  # an empty completion gets one masked filler token
    assert rows["prompt_ids"] == [[1, 2], [1, 2], [0]]
    assert rows["env_mask"] == [[1, 0, 1], [0], [0]]
    assert rows["logprobs"] == [[-0.5, 0.0, -0.25], [0.0], [0.0]]
    assert rows["shopsim_reward"] == [0.5, None, None]  # None: TRL's unscorable, zero advantage
    assert rows["shopsim_untrained_tokens"] == [2, 0, 0]  # the drifted episode's second sample is not trained on
    strict = TRLRollout("unused.yaml", out_dir="unused", on_drift="error")
    with pytest.raises(ConfigError) as caught:
        strict._rows([_episode([first, forked])], trainer(1))
    assert caught.value.code == "exact-tokens-drift" and "\n" not in str(caught.value)

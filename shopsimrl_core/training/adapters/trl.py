"""TRL's ``GRPOTrainer`` trained on ShopSimulator episodes played by OUR runtime (``pip install 'shopsimrl[trl]'``).

Use::

    with TRLRollout("train.yaml", out_dir="runs/trl", sampling=SamplingSpec(temperature=0.7, max_tokens=64)) as rollout:
        trainer = GRPOTrainer(model=policy, processing_class=tokenizer, reward_funcs=[environment_reward],
                              args=GRPOConfig(num_generations=4, temperature=0.7, ...),
                              train_dataset=rollout.dataset(), rollout_func=rollout)
        trainer.train()

Promise: each TRL generation is one training episode of :class:`TrainingSession` — ``run_episode`` itself, so the
same prompt builder, persona, tool schemas, validation, protocol feedback, leases, reward and termination as
``shopsimrl run`` — sampled by :class:`TransformersBackend` from the trainer's *current* policy weights with exact
tokens. The ``num_generations`` consecutive copies of a prompt TRL's sampler hands over form ONE group of the
session (one curriculum assignment; the last finisher completes it and writes its triage). Per generation the
rollout function returns (TRL 1.16 ``rollout_func`` contract): ``prompt_ids`` (the first turn's prompt),
``completion_ids`` (everything after: sampled tokens and the tool/user/observation tokens between turns),
``logprobs`` (the engine's on sampled tokens, 0.0 elsewhere) and ``env_mask`` (1 on sampled tokens, 0 on
environment tokens; TRL multiplies it into the loss mask), plus ``shopsim_reward`` — the environment's reward, or
None for an episode that ended in an environment or runtime error, which TRL treats as unscorable (no baseline
share, zero advantage) while its row (all mask 0) keeps the group's shape. Traces, token sidecar and triage go to
``out_dir`` exactly as for any training session (the viewer opens ``out_dir``).

One generation is one row, so an episode whose chat template drifted (several token samples) contributes its
FIRST sample; the later samples stay in ``samples.jsonl`` and are counted in ``shopsim_untrained_tokens``
(``on_drift="error"`` refuses such an episode instead). A prefix-stable template (the policy's own, rendering
assistant turns as they were sampled) avoids drift altogether.

TRL recomputes logprobs at ``GRPOConfig.temperature``: it must equal the sampling temperature (refused
otherwise). Nothing here imports trl; torch comes in with the in-process backend.
"""

from __future__ import annotations

import asyncio
import copy
import importlib
import os
import re
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from shopsimrl_core._errors import ConfigError
from shopsimrl_core.training._tokens import SamplingSpec

if TYPE_CHECKING:
    from shopsimrl_core.runs.config._config import EvalConfig
    from shopsimrl_core.training._samples import TokenSample
    from shopsimrl_core.training._session import TrainingEpisode, TrainingSession
    from shopsimrl_core.training._tokens import TokenBackend

__all__ = ["TRLRollout", "environment_reward", "task_prompt", "trainable_from_gguf", "PROMPT_PREFIX"]

#: the dataset prompt of a task: TRL hands prompts (not rows) to the rollout function, so the task id travels in it
PROMPT_PREFIX = "shopsim-task:"
_PROMPT = re.compile(rf"^{re.escape(PROMPT_PREFIX)}(\d+)$")
_T = TypeVar("_T")


def task_prompt(task_id: int) -> str:
    """The dataset prompt that stands for *task_id* (``shopsim-task:<id>``)."""
    return f"{PROMPT_PREFIX}{int(task_id)}"


def environment_reward(completions: list[Any], shopsim_reward: list[float | None], **_: Any) -> list[float | None]:
    """The TRL reward function: the environment's reward of each episode (None: aborted, TRL drops it)."""
    return list(shopsim_reward)


def trainable_from_gguf(model: Any) -> Any:
    """A model loaded with ``from_pretrained(..., gguf_file=...)`` as a plain, trainable model of the same weights.

    transformers dequantizes a GGUF to float32 on load but keeps it flagged as quantized (``GgufHfQuantizer``), and
    the ``Trainer`` refuses to fine-tune a quantized model; the copy has the same config (minus the quantization
    entry), weights and generation config, and no quantizer.
    """
    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    plain = type(model)(config)
    plain.load_state_dict(model.state_dict())
    plain.generation_config = copy.deepcopy(model.generation_config)
    return plain.to(model.dtype)


class _LoopThread:
    """One event loop in a daemon thread: the session (HTTP clients, leases) lives across TRL's rollout calls."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="shopsimrl-trl-rollouts", daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=30)
        if not self._thread.is_alive():
            self.loop.close()


class TRLRollout:
    """A ``rollout_func`` for ``trl.GRPOTrainer`` that plays each generation as a training episode of ours.

    *config* is the evaluation YAML of a train split (or a loaded ``EvalConfig``); *out_dir* receives traces,
    ``samples.jsonl`` and triage. *backend* defaults to a :class:`TransformersBackend` over the trainer's model
    and ``processing_class`` (set at the first call; the tokenizer needs a chat template that renders tools).
    *group_size*, when given, must equal the trainer's ``num_generations``. Use it as a context manager (or call
    :meth:`close`) so the environment leases are released.
    """

    def __init__(self, config: str | os.PathLike[str] | EvalConfig, *, out_dir: str | os.PathLike[str],
                 sampling: SamplingSpec | None = None, backend: TokenBackend | None = None,
                 group_size: int | None = None, curriculum: dict[str, Any] | str | os.PathLike[str] | None = None,
                 diagnostic_retry: bool = True, on_drift: str = "first_sample") -> None:
        if on_drift not in ("first_sample", "error"):
            raise ConfigError(f"on_drift: must be 'first_sample' or 'error' (got {on_drift!r})",
                              code="config-invalid")
        self.config = config
        self.out_dir = Path(out_dir)
        self.sampling = sampling or SamplingSpec()
        self.backend = backend
        self.group_size = group_size
        self.curriculum = curriculum
        self.diagnostic_retry = diagnostic_retry
        self.on_drift = on_drift
        self.session: TrainingSession | None = None
        self.episodes: list[TrainingEpisode] = []
        """Every episode played, in order (the rows handed to TRL, batch after batch)."""
        self.outputs: list[dict[str, Any]] = []
        """What each call returned to TRL, in order (tests compare it with the trainer's own recomputation)."""
        self._loop: _LoopThread | None = None
        self._plan_tasks: list[int] | None = None

    # -- the trainer's side --

    def dataset(self) -> Any:
        """A ``datasets.Dataset`` with one ``prompt`` per task the config plans (``shopsim-task:<id>``, sorted)."""
        datasets = importlib.import_module("datasets")  # trl's own dependency (not in the core's type check)
        return datasets.Dataset.from_list([{"prompt": task_prompt(t)} for t in self._tasks()])

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        """TRL's ``rollout_func(prompts, trainer)``: one episode per prompt copy, groups of ``num_generations``.

        Raises:
            ConfigError: TRL's evaluation loop (the model in eval mode), a prompt that is no ``shopsim-task:<id>``,
                prompts not in runs of ``num_generations``, a group size or temperature that differs from the
                trainer's, a drifted episode with ``on_drift="error"``, or any refusal of the session (guarded
                split, sampling).
        """
        if getattr(getattr(trainer, "model", None), "training", True) is False:
            raise ConfigError("TRL's evaluation loop (eval_dataset) is not played by the training adapter: evaluate "
                              "checkpoints with `shopsimrl run` on the val/test split (docs/training.md#trl)",
                              code="training-guarded-split")
        groups = self._groups(prompts, int(trainer.num_generations))
        self._check_temperature(trainer)
        session = self._open(trainer)
        loop = self._loop
        assert loop is not None

        async def play_all() -> list[list[TrainingEpisode]]:
            return list(await asyncio.gather(*(session.play_group(task) for task in groups)))

        played = [episode for group in loop.run(play_all()) for episode in group]
        self.episodes.extend(played)
        output = self._rows(played, trainer)
        self.outputs.append(output)
        return output

    def close(self) -> None:
        """Close the session (leases released, files closed) and stop the rollout loop."""
        if self._loop is not None:
            if self.session is not None:
                self._loop.run(self.session.__aexit__(None, None, None))
            self._loop.stop()
        self.session, self._loop = None, None

    def __enter__(self) -> TRLRollout:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals --

    def _tasks(self) -> list[int]:
        if self._plan_tasks is None:
            from shopsimrl_core.runs.config._config import EvalConfig, load_config
            from shopsimrl_core.runs.planning._plan import build_plan

            loaded = self.config if isinstance(self.config, EvalConfig) else load_config(Path(self.config))
            self._plan_tasks = sorted({job.task_id for job in build_plan(loaded).jobs})
        return list(self._plan_tasks)

    @staticmethod
    def _groups(prompts: list[Any], size: int) -> list[int]:
        tasks: list[int] = []
        for prompt in prompts:
            match = _PROMPT.match(prompt) if isinstance(prompt, str) else None
            if match is None:
                raise ConfigError(f"TRL prompt {str(prompt)[:60]!r}: not a ShopSimulator task; build the train "
                                  "dataset with TRLRollout.dataset() (prompts 'shopsim-task:<id>')",
                                  code="config-invalid")
            tasks.append(int(match.group(1)))
        if size < 1 or len(tasks) % size:
            raise ConfigError(f"TRL handed {len(tasks)} prompts for groups of num_generations={size}; the batch "
                              "must hold whole groups", code="group-size-mismatch")
        starts = tasks[::size]
        for index, task in enumerate(starts):
            if tasks[index * size:(index + 1) * size] != [task] * size:
                raise ConfigError(f"TRL prompts {tasks[index * size:(index + 1) * size]}: a group of "
                                  f"num_generations={size} must repeat one task (TRL's RepeatSampler order)",
                                  code="group-size-mismatch")
        return starts

    def _check_temperature(self, trainer: Any) -> None:
        temperature = float(getattr(trainer, "temperature", getattr(trainer.args, "temperature", 1.0)))
        if abs(temperature - self.sampling.temperature) > 1e-9:
            raise ConfigError(f"GRPOConfig.temperature={temperature} but the rollouts sample at temperature "
                              f"{self.sampling.temperature}; TRL recomputes logprobs at its own temperature — set "
                              "both to the same value", code="exact-tokens-sampling")

    def _open(self, trainer: Any) -> TrainingSession:
        size = int(trainer.num_generations)
        if self.group_size is not None and self.group_size != size:
            raise ConfigError(f"group_size={self.group_size} but GRPOConfig.num_generations={size}; a GRPO group "
                              "is one session group — set both to the same value", code="group-size-mismatch")
        from shopsimrl_core.training._inprocess import TransformersBackend

        policy = trainer.accelerator.unwrap_model(trainer.model)
        if self.backend is None:
            self.backend = TransformersBackend(policy, trainer.processing_class)
        elif isinstance(self.backend, TransformersBackend):
            self.backend.model = policy  # the rollouts sample the weights being optimized
        if self.session is None:
            from shopsimrl_core.training._session import TrainingSession

            session = TrainingSession.from_config(self.config, backend=self.backend, out_dir=self.out_dir,
                                                  sampling=self.sampling, group_size=size,
                                                  curriculum=self.curriculum,
                                                  diagnostic_retry=self.diagnostic_retry, adapter="trl")
            self._loop = _LoopThread()
            self._loop.run(session.__aenter__())
            self.session = session
        return self.session

    def _rows(self, episodes: list[TrainingEpisode], trainer: Any) -> dict[str, Any]:
        rows: dict[str, list[Any]] = {key: [] for key in (
            "prompt_ids", "completion_ids", "logprobs", "env_mask", "shopsim_reward", "shopsim_episode_id",
            "shopsim_group_key", "shopsim_untrained_tokens")}
        filler = _filler_token(trainer)
        for episode in episodes:
            sample: TokenSample = episode.samples[0]
            later = episode.samples[1:]
            if later and self.on_drift == "error":
                raise ConfigError(f"episode {episode.episode_id}: the chat template drifted at turn "
                                  f"{later[0].turn_indices[0]} ({len(episode.samples)} token samples) and TRL takes "
                                  "one completion per generation; use a prefix-stable chat template or "
                                  "on_drift='first_sample'", code="exact-tokens-drift")
            completion, logprobs, mask = list(sample.response_ids), list(sample.rollout_logprobs), list(
                sample.loss_mask)
            if episode.aborted:
                mask = [0] * len(completion)
            if not completion:  # TRL reads each completion's last token: an empty one gets one masked filler
                completion, logprobs, mask = [filler], [0.0], [0]
            rows["prompt_ids"].append(list(sample.prompt_ids) or [filler])
            rows["completion_ids"].append(completion)
            rows["logprobs"].append(logprobs)
            rows["env_mask"].append(mask)
            rows["shopsim_reward"].append(None if episode.aborted else float(episode.reward))
            rows["shopsim_episode_id"].append(episode.episode_id)
            rows["shopsim_group_key"].append(episode.group_key)
            rows["shopsim_untrained_tokens"].append(sum(s.sampled_count for s in later))
        return rows


def _filler_token(trainer: Any) -> int:
    tokenizer = getattr(trainer, "processing_class", None)
    for name in ("pad_token_id", "eos_token_id"):
        value = getattr(tokenizer, name, None)
        if isinstance(value, int):
            return value
    return 0

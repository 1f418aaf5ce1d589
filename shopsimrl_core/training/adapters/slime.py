"""slime's custom generate function: each slime sample of a ShopSimulator task is one training episode of ours.

Use: ``--custom-generate-function-path shopsimrl_core.training.adapters.slime.generate`` with the task data of
``export_slime_tasks`` (``--input-key prompt --metadata-key metadata``) and a ``--custom-config-path`` YAML whose
keys slime sets on ``args``:

- ``shopsimrl_config`` (required): the evaluation YAML of a train split (environment, ``runtime.max_steps``,
  prompt, persona, split file) — the same file ``shopsimrl run`` reads;
- ``shopsimrl_out_dir`` (required): where traces, the token sidecar and the triage documents go;
- ``shopsimrl_curriculum`` (optional): the round's ``curriculum.json``;
- ``shopsimrl_diagnostic_retry`` (optional, default true);
- ``shopsimrl_backend`` (optional): ``sglang-generate`` (default: slime's router ``/generate``, prompts rendered
  with the tokenizer of ``--hf-checkpoint``) or ``vllm-chat`` (the YAML's ``model`` endpoint).

Promise: :func:`generate` plays the sample with ``TrainingSession.play`` (our runtime: same prompt, tools,
validation, protocol feedback, leases, reward and termination as evaluation) and returns slime ``Sample`` objects built
by :func:`to_slime_samples` from the episode's exact-token samples: ``tokens`` = prompt + response,
``response_length``, ``loss_mask`` and ``rollout_log_probs`` of that length, ``status``, ``reward`` (the
environment's, so slime's reward model is not called) and ``metadata``. An episode whose chat template drifted
returns several samples (slime's fan-out), sharing one ``rollout_id``. An episode that ended in an environment or
runtime error returns ONE zero-loss placeholder (status ``FAILED``, ``remove_sample``, every mask entry 0,
reward 0.0): the group keeps its shape and nothing is trained on. ``evaluation=True`` (slime eval datasets) is
refused: val/test go through the evaluator (``shopsimrl run``).

slime holds its generation semaphore while this runs; the session never waits for the rest of a group (the
last sample to finish completes the group: triage, diagnostic retry), so a semaphore smaller than the group
cannot deadlock. Nothing here imports slime: the ``Sample`` class and its ``Status`` enum are the ones of the
sample slime passes in. slime itself never ran here (docs/training.md#slime).
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from shopsimrl_core._errors import ConfigError

__all__ = ["generate", "to_slime_samples", "task_id_of", "close_sessions", "SLIME_ARGS"]

#: the ``args`` attributes this adapter reads (set them in slime's ``--custom-config-path`` YAML)
SLIME_ARGS = ("shopsimrl_config", "shopsimrl_out_dir", "shopsimrl_curriculum", "shopsimrl_diagnostic_retry",
              "shopsimrl_backend")

_SESSIONS: dict[tuple[Any, ...], Any] = {}
_FILLER: dict[tuple[Any, ...], int] = {}
_LOCK: asyncio.Lock | None = None


def task_id_of(sample: Any) -> int:
    """The ShopSimulator task of a slime sample: ``metadata.task_id`` (export_slime_tasks), else the prompt.

    Raises:
        ConfigError: neither is an integer task id.
    """
    metadata = sample.metadata if isinstance(getattr(sample, "metadata", None), dict) else {}
    value = metadata.get("task_id", sample.prompt)
    try:
        if isinstance(value, bool):
            raise ValueError(value)
        return int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"slime sample {getattr(sample, 'index', None)}: no task id (metadata.task_id or prompt "
                          f"{str(value)[:40]!r}); write the task data with export_slime_tasks",
                          code="training-task-unknown") from None


def _spec(sampling_params: dict[str, Any]) -> Any:
    from shopsimrl_core.training._tokens import SamplingSpec

    return SamplingSpec(temperature=float(sampling_params.get("temperature", 1.0)),
                        top_p=float(sampling_params.get("top_p", 1.0)),
                        top_k=sampling_params.get("top_k"),
                        max_tokens=int(sampling_params.get("max_new_tokens", 512)))


def _required(args: Any, name: str) -> str:
    value = getattr(args, name, None)
    if not value:
        raise ConfigError(f"slime args: {name} is not set; add `{name}: ...` to the --custom-config-path YAML "
                          "(docs/training.md#slime)", code="config-invalid")
    return str(value)


def _backend(args: Any, plan: Any) -> tuple[Any, int]:
    """The token backend *args* name, and the token id that fills an empty placeholder."""
    from shopsimrl_core.training._backends import SGLangGenerateBackend, VLLMChatBackend

    kind = getattr(args, "shopsimrl_backend", None) or "sglang-generate"
    if kind == "vllm-chat":
        return VLLMChatBackend.from_model_config(plan.config.model), 0
    if kind != "sglang-generate":
        raise ConfigError(f"slime args: shopsimrl_backend must be sglang-generate or vllm-chat (got {kind!r})",
                          code="config-invalid")
    from transformers import AutoTokenizer

    from shopsimrl_core.training._chat_template import ChatTemplate

    tokenizer: Any = AutoTokenizer.from_pretrained(args.hf_checkpoint, trust_remote_code=True)
    url = f"http://{args.sglang_router_ip}:{args.sglang_router_port}"
    filler = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return SGLangGenerateBackend(url, ChatTemplate(tokenizer, source=str(args.hf_checkpoint)),
                                 model=str(args.hf_checkpoint)), int(filler or 0)


async def _session(args: Any, sampling_params: dict[str, Any]) -> tuple[Any, int]:
    """The process's training session for *args* (opened on first use; one per config, output and sampling)."""
    global _LOCK
    from shopsimrl_core.training._session import TrainingSession

    spec = _spec(sampling_params)
    key = (_required(args, "shopsimrl_config"), _required(args, "shopsimrl_out_dir"),
           int(args.n_samples_per_prompt), spec)
    if key in _SESSIONS:
        return _SESSIONS[key], _FILLER[key]
    if _LOCK is None:
        _LOCK = asyncio.Lock()
    async with _LOCK:
        if key not in _SESSIONS:
            session = TrainingSession.from_config(
                key[0], backend=None, out_dir=key[1], sampling=spec, group_size=key[2],
                curriculum=getattr(args, "shopsimrl_curriculum", None),
                diagnostic_retry=bool(getattr(args, "shopsimrl_diagnostic_retry", True)), adapter="slime")
            from shopsimrl_core.training._tokens import check_exact_sampling

            check_exact_sampling(spec, source="slime --rollout-*")
            session.backend, _FILLER[key] = _backend(args, session.plan)
            await session.__aenter__()
            _SESSIONS[key] = session
    return _SESSIONS[key], _FILLER[key]


async def close_sessions() -> None:
    """Close every session this process opened (leases released, sidecar and traces closed)."""
    while _SESSIONS:
        _, session = _SESSIONS.popitem()
        await session.__aexit__(None, None, None)
    _FILLER.clear()


async def generate(args: Any, sample: Any, sampling_params: dict[str, Any], evaluation: bool = False) -> Any:
    """Play *sample* as one training episode (slime's custom generate); return its ``Sample`` or samples.

    The sample's place in its group is ``sample.index % args.n_samples_per_prompt`` (slime numbers the
    samples of a group consecutively).

    Raises:
        ConfigError: an eval dataset (``evaluation=True``), a sample without a task id, a task outside the
            config's train split or of a guarded split, sampling that cannot be replayed exactly, a sample
            played twice.
    """
    if evaluation:
        raise ConfigError("slime eval datasets are not played by the training adapter: evaluate val/test "
                          "checkpoints with `shopsimrl run` (docs/training.md#slime)", code="training-guarded-split")
    session, filler = await _session(args, sampling_params)
    episode = await session.play(task_id_of(sample), int(sample.index) % int(args.n_samples_per_prompt))
    return to_slime_samples(episode, sample, filler_token_id=filler)


def _response_text(record: dict[str, Any], turns: list[int]) -> str:
    """What slime logs as the response: the action (or the protocol error) of each covered turn."""
    lines = []
    for step in record.get("steps") or []:
        if step.get("step_index") in turns:
            problem = step.get("protocol_error") or step.get("policy_failure") or {}
            lines.append(str(step.get("action") or f"<{problem.get('code', 'no action')}>"))
    return "\n".join(lines)


def to_slime_samples(episode: Any, sample: Any, *, filler_token_id: int = 0) -> Any:
    """The slime ``Sample`` (or samples) of a :class:`~shopsimrl_core.training.TrainingEpisode`, built on *sample*.

    One token sample → *sample* itself, filled in; several (template drift) → a list of copies sharing
    ``rollout_id``; an aborted episode → one zero-loss placeholder. Promise on every returned sample:
    ``tokens == prompt + response``, ``len(loss_mask) == len(rollout_log_probs) == response_length >= 1``.
    """
    status = type(sample).Status
    record = episode.record
    steps = record.get("steps") or []
    truncated = bool(steps) and (steps[-1].get("policy_failure") or {}).get("code") == "generation_length"
    base_metadata = dict(sample.metadata) if isinstance(sample.metadata, dict) else {}
    out = []
    for position, token_sample in enumerate(episode.samples):
        prompt = list(token_sample.prompt_ids)
        response = list(token_sample.response_ids)
        mask = list(token_sample.loss_mask)
        logprobs = [float(v) for v in token_sample.rollout_logprobs]
        if episode.aborted:
            # zero-loss placeholder: slime needs a prompt and a response token; nothing of it is trained on
            prompt = prompt or [filler_token_id]
            response = response or [filler_token_id]
            mask = [0] * len(response)
            logprobs = [0.0] * len(response)
        target = sample if position == 0 else copy.copy(sample)
        target.tokens = prompt + response
        target.response_length = len(response)
        target.loss_mask = mask
        target.rollout_log_probs = logprobs
        target.response = _response_text(record, list(token_sample.turn_indices))
        target.reward = 0.0 if episode.aborted else float(episode.reward)
        target.status = status.FAILED if episode.aborted else status.TRUNCATED if truncated else status.COMPLETED
        target.remove_sample = bool(episode.aborted)
        target.metadata = {**base_metadata, "shopsimrl": {
            "episode_id": episode.episode_id, "group_key": episode.group_key,
            "sample_in_group": episode.sample_index, "token_sample": position,
            "token_samples": len(episode.samples), "reason": token_sample.reason,
            "turns": list(token_sample.turn_indices), "aborted": episode.aborted, "success": episode.success,
            "assignment": dict(episode.assignment)}}
        out.append(target)
    if len(out) > 1:
        # slime's contract for fan-out: siblings of one rollout share rollout_id (its default is the index)
        rollout_id = sample.rollout_id if getattr(sample, "rollout_id", None) is not None else sample.index
        for target in out:
            target.rollout_id = rollout_id
        return out
    return out[0]

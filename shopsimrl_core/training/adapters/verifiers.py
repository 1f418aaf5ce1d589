"""ShopSimulator as an environment of the ``verifiers`` package (``pip install 'shopsimrl[verifiers]'``).

Promise: ``vf-eval shopsimrl-verifiers --env.taskset.config EVAL.yaml -m MODEL --client.base-url URL`` plays
the jobs ``shopsimrl run EVAL.yaml`` would play — same tasks, samples and seeds — with OUR episode
runtime (``run_episode``: prompt builder and persona, skill block, dynamic tool schemas, action
validation, protocol feedback, environment leases, reward and termination). Only the model call goes
through verifiers: each turn posts the runtime-semantics §7.1 body (messages, tools, ``seed = call_seed(job seed,
step)``) with an ``AsyncOpenAI`` client to the rollout's interception endpoint, which verifiers
forwards to its client (``--client.*``; a ``train`` client records token ids for prime-rl), and the
answer is checked by ``validate_completion``, the evaluator's own check. The verifiers reward is
the environment's reward (``final.reward``); a failed episode (environment or runtime error) is a
failed verifiers rollout, never a reward of 0.

verifiers finds plugins by the name of an installed top-level package, so the id is
``shopsimrl-verifiers`` (the package ``shopsimrl_verifiers`` re-exports the classes below). This module
imports verifiers at import time: nothing else in the core imports it.

Parts: :class:`ShopSimTaskset` (the plan's jobs as tasks), :class:`ShopSimHarness` (plays one episode
in-process), :class:`ShopSimEnv` (one agent seat on the local subprocess runtime; opens the
environment client once per eval and closes it after).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

try:
    import verifiers.v1 as vf  # type: ignore[import-untyped]  # verifiers ships no type information
    from openai import APIError, AsyncOpenAI
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "the verifiers adapter needs the verifiers package: pip install 'shopsimrl[verifiers]'"
    ) from exc
import httpx

from shopsimrl_core.adapters._json import loads_finite
from shopsimrl_core.adapters._model import ChatModelClient, ModelRequestError, model_identity
from shopsimrl_core.adapters._validation import ModelOutput, validate_completion

__all__ = [
    "ShopSimEnv",
    "ShopSimEnvConfig",
    "ShopSimHarness",
    "ShopSimHarnessConfig",
    "ShopSimTask",
    "ShopSimTaskData",
    "ShopSimTaskset",
    "ShopSimTasksetConfig",
    "InterceptedChatModel",
    "PLUGIN_ID",
]

#: the id verifiers imports (the installed package ``shopsimrl_verifiers``)
PLUGIN_ID = "shopsimrl-verifiers"
#: where the harness leaves its episode summary on the verifiers trace (``trace.info``)
INFO_KEY = "shopsimrl"


# -- the model turn ------------------------------------------------------------------------------


class InterceptedChatModel:
    """The episode's chat model: our runtime-semantics §7.1 body over ``AsyncOpenAI``, our §7.3 checks.

    ``body_builder`` is a :class:`ChatModelClient` used only for its body (never for HTTP), so the
    body is byte-for-byte the one evaluation sends for the same settings. verifiers' interception
    overlays only what its run sets (``-m`` and the ``--sampling.*`` keys it was given); the seed
    and the tools pass through.
    """

    def __init__(self, client: AsyncOpenAI, body_builder: ChatModelClient) -> None:
        self.client = client
        self.body_builder = body_builder

    def sent_seed(self, seed: int | None) -> int | None:
        """The seed that goes on the wire for *seed* (the evaluator's rule)."""
        return self.body_builder.sent_seed(seed)

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, *, seed: int | None
    ) -> ModelOutput:
        """One model turn; a bad 2xx body is a protocol error on the output, a failed call raises.

        Raises:
            ModelRequestError: the endpoint failed after the client's retries (the episode fails at
                ``model_step_N``, as in evaluation).
        """
        body = self.body_builder.build_body(list(messages), tools, seed)
        body["stream"] = False  # the interception serves whole turns; a stream would be reassembled anyway
        offered = [t["function"]["name"] for t in tools or [] if isinstance(t.get("function"), dict)]
        try:
            response = await self.client.post("/chat/completions", body=body, cast_to=httpx.Response)
        except APIError as exc:
            raise ModelRequestError(f"model request through verifiers failed: {type(exc).__name__}: {exc}") from exc
        text = response.text
        try:
            decoded = loads_finite(text)
        except json.JSONDecodeError as exc:
            out = ModelOutput(body=None)
            out.protocol_error = {
                "code": "invalid_json_response",
                "message": f"model response is not valid JSON: {exc}",
            }
            out.raw_response = {"text": text[:4000]}
            return out
        return validate_completion(decoded, offered)


# -- the evaluation a taskset stands for ---------------------------------------------------------


@dataclass
class _Evaluation:
    """What one eval YAML gives every episode: the plan (jobs, prompt, skills, identities) and the environment."""

    path: str
    plan: Any  # runs.planning._plan.EvalPlan
    env: Any = None  # ShopSimulatorClient (or pool), opened by ShopSimEnv.start (mode evaluate)
    session: Any = None  # TrainingSession, opened by ShopSimEnv.start (mode train)
    played: dict[int, int] = field(default_factory=dict)
    """Mode train: rollouts started per task; the next one is sample ``played % group_size`` of its group."""

    def next_sample(self, task_id: int, group_size: int) -> int:
        """The group position of the task's next rollout (verifiers starts a task's ``-r`` rollouts together)."""
        count = self.played.get(task_id, 0)
        self.played[task_id] = count + 1
        return count % group_size


def _load_plan(path: str) -> Any:
    """The evaluation plan of *path*, refused (one line) for a guarded split."""
    from shopsimrl_core._errors import ConfigError
    from shopsimrl_core.runs.config._config import load_config
    from shopsimrl_core.runs.planning._plan import build_plan

    if not path:
        raise ConfigError(
            f"{PLUGIN_ID}: env.taskset.config is not set; pass --env.taskset.config PATH/TO/EVAL.yaml "
            "(the YAML `shopsimrl run` takes)",
            code="config-invalid",
        )
    plan = build_plan(load_config(path))
    if plan.guarded:
        raise ConfigError(
            f"{path}: tasks.split {plan.split.name!r} is a guarded test split; verifiers may not play it — "
            "evaluate test splits with `shopsimrl run` and its opt-in (docs/training.md#verifiers)",
            code="training-guarded-split",
        )
    return plan


_OPEN: dict[str, _Evaluation] = {}
"""Evaluations whose environment client a running :class:`ShopSimEnv` holds, by absolute config path."""


def _environment_client(plan: Any) -> Any:
    from shopsimrl_core.runs.leases._env_pool import environment_client

    return environment_client(plan.config.environment, persona=plan.persona)


# -- verifiers plugin classes --------------------------------------------------------------------


class ShopSimTasksetConfig(vf.TasksetConfig):  # type: ignore[misc]
    """``--env.taskset.*``: which evaluation YAML the tasks come from."""

    config: str = ""
    """The eval YAML (the file ``shopsimrl run`` takes): split, sample, seeds, environment, prompt, skills."""
    mode: Literal["evaluate", "train"] = "evaluate"
    """``evaluate``: one task per planned job (``shopsimrl run``'s tasks, samples and seeds). ``train``: one task
    per task of a train split, each rollout one sample of a GRPO group played by ``TrainingSession``
    (traces with the training block, triage documents) — set ``-r`` to ``group_size``."""
    out_dir: str = ""
    """Mode train: the training session's folder (traces.jsonl, triage/, leases)."""
    group_size: int = 1
    """Mode train: samples per group; must equal vf-eval's ``-r`` (rollouts per task)."""
    curriculum: str | None = None
    """Mode train: the round's ``curriculum.json`` (one skill assignment per group)."""
    diagnostic_retry: bool = False
    """Mode train: the all-skills retry of a failed group. Off by default: the retry would be played through the
    last rollout's interception and recorded (and trained on) as part of that rollout."""


class ShopSimTaskData(vf.TaskData):  # type: ignore[misc]
    """One planned job of the eval YAML (``id`` is its episode id)."""

    task_id: int
    sample_id: int
    seed: int
    split: str
    config: str
    """Absolute path of the eval YAML the job belongs to."""
    mode: str = "evaluate"
    """``evaluate`` (the job as planned) or ``train`` (a sample of the task's next group; seed set by the session)."""


class ShopSimTask(vf.Task[ShopSimTaskData, vf.State, vf.TaskConfig]):  # type: ignore[misc]
    """A ShopSimulator job; its reward is the environment's."""

    @property
    def key(self) -> str:
        """The episode id (``task-000012__sample-000``; mode train: ``task-000012``): unique and stable."""
        return str(self.data.id)

    @vf.reward  # type: ignore[untyped-decorator]
    async def environment_reward(self, trace: Any) -> float:
        """``final.reward`` of the episode the harness played (its ``trace.info``)."""
        return float(trace.info[INFO_KEY]["reward"])

    @vf.metric  # type: ignore[untyped-decorator]
    async def success(self, trace: Any) -> float:
        """``final.reward_detail.r_success`` (1 when the purchase matched the goal)."""
        return float(trace.info[INFO_KEY].get("r_success") or 0)

    @vf.metric  # type: ignore[untyped-decorator]
    async def protocol_errors(self, trace: Any) -> float:
        """Model turns the runtime answered with protocol feedback instead of an action."""
        return float(trace.info[INFO_KEY]["protocol_errors"])


class ShopSimTaskset(vf.Taskset[ShopSimTask, ShopSimTasksetConfig]):  # type: ignore[misc]
    """The jobs of an eval YAML, in plan order: ``shopsimrl run``'s tasks, samples and seeds."""

    def __init__(self, config: ShopSimTasksetConfig) -> None:
        super().__init__(config)
        self._plan: Any = None

    @property
    def plan(self) -> Any:
        """The evaluation plan (built once; a guarded split is refused here)."""
        if self._plan is None:
            self._plan = _load_plan(self.config.config)
        return self._plan

    def load(self) -> list[ShopSimTask]:
        """One task per planned job (mode evaluate) or per planned task (mode train)."""
        plan = self.plan
        path = str(Path(self.config.config).resolve())
        train = self.config.mode == "train"
        jobs = [job for job in plan.jobs if job.sample_id == 0] if train else plan.jobs
        return [
            ShopSimTask(
                ShopSimTaskData(
                    # mode train: the task's rollouts are the samples of its groups, each with its own episode id
                    id=f"task-{job.task_id:06d}" if train else job.episode_id,
                    name=f"task-{job.task_id:06d}" if train else job.episode_id,
                    # verifiers needs an opening prompt; the harness builds the real one from the reset
                    prompt=f"ShopSimulator task {job.task_id} (sample {job.sample_id}, split {job.split})",
                    task_id=job.task_id,
                    sample_id=job.sample_id,
                    seed=job.seed,
                    split=job.split,
                    config=path,
                    mode=self.config.mode,
                ),
                self.config.task,
            )
            for job in jobs
        ]


class ShopSimHarnessConfig(vf.HarnessConfig):  # type: ignore[misc]
    """The harness has no knobs: the eval YAML holds the runtime's settings."""


class ShopSimHarness(vf.Harness[ShopSimHarnessConfig]):  # type: ignore[misc]
    """Plays one episode in-process with ``run_episode``; every model call goes through the interception."""

    APPENDS_SYSTEM_PROMPT = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(
        self,
        ctx: Any,
        trace: Any,
        runtime: Any,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: Any,
        **_: Any,
    ) -> Any:
        """Run the job of *data*; leave its summary in ``trace.info``; a failed episode raises.

        Raises:
            HarnessError: the episode ended in an environment or runtime error (its record's
                ``error`` in the message); verifiers records the rollout as failed, unscored.
        """
        from shopsimrl_core.episode._runtime import EpisodeSettings, run_episode
        from shopsimrl_core.runs.planning._jobs import EpisodeJob

        if data.mode == "train":
            return await self._train(ctx, trace, endpoint, secret, data)
        evaluation = _OPEN.get(data.config)
        own_env = evaluation is None
        plan = evaluation.plan if evaluation is not None else _load_plan(data.config)
        env = evaluation.env if evaluation is not None else _environment_client(plan)
        job = EpisodeJob(data.task_id, data.sample_id, data.seed, data.split)
        builder, identity = _body_builder(plan.config.model, ctx)
        m = plan.config.model
        client = AsyncOpenAI(
            base_url=endpoint, api_key=secret, timeout=m.timeout, max_retries=max(0, m.max_retries - 1)
        )
        settings = EpisodeSettings(
            max_steps=plan.config.runtime.max_steps,
            persona=plan.persona,
            model_identity=identity,
            environment_identity=plan.environment_identity,
            prompt_identity=dict(plan.prompt.identity),
            skills_identity=dict(plan.skills.identity),
            runtime=plan.runtime_identity,
            tool_call_content=m.tool_call_content,
        )
        try:
            if own_env:
                await env.__aenter__()
            record = await run_episode(
                job,
                model=InterceptedChatModel(client, builder),
                env=env,
                prompt=plan.prompt,
                skills=plan.skills,
                settings=settings,
            )
        finally:
            await client.close()
            if own_env:
                await env.aclose()
        return _finish(trace, record)

    async def _train(self, ctx: Any, trace: Any, endpoint: str, secret: str, data: Any) -> Any:
        """Mode train: one sample of the task's next group, played by the env's ``TrainingSession``."""
        evaluation = _OPEN.get(data.config)
        if evaluation is None or evaluation.session is None:
            raise vf.HarnessError(f"{PLUGIN_ID}: mode train needs the env {ShopSimEnv.__name__} (its start() opens "
                                  "the training session); run it with its own env, not --env.id")
        session = evaluation.session
        builder, _ = _body_builder(session.plan.config.model, ctx)
        m = session.plan.config.model
        client = AsyncOpenAI(
            base_url=endpoint, api_key=secret, timeout=m.timeout, max_retries=max(0, m.max_retries - 1)
        )
        index = evaluation.next_sample(data.task_id, session.group_size)
        try:
            episode = await session.play(data.task_id, index, model=InterceptedChatModel(client, builder))
        finally:
            await client.close()
        return _finish(trace, episode.record)


def _finish(trace: Any, record: dict[str, Any]) -> Any:
    """Leave the episode's summary on the verifiers trace; a failed (aborted) episode fails the rollout."""
    trace.info[INFO_KEY] = episode_summary(record)
    if record["status"] != "completed":
        error = record.get("error") or {}
        raise vf.HarnessError(
            f"episode {record['episode_id']} failed at {error.get('stage')}: "
            f"{error.get('type')}: {error.get('message')}"
        )
    return vf.ProgramResult(exit_code=0, stdout="", stderr="")


def _body_builder(m: Any, ctx: Any) -> tuple[ChatModelClient, dict[str, Any]]:
    """The body builder for the config's ``model`` section under verifiers' model and sampling, and its identity.

    verifiers' interception overwrites ``model`` and every ``--sampling.*`` key it was given; the body
    is built with the same values so the trace's identity says what was sent.
    """
    sampling = ctx.sampling.model_dump(exclude_none=True) if ctx.sampling is not None else {}
    temperature = float(sampling.pop("temperature", m.temperature))
    top_p = sampling.pop("top_p", m.top_p)
    max_tokens = int(sampling.pop("max_tokens", m.max_tokens))
    extra_body = {**m.extra_body, **sampling}
    settings: dict[str, Any] = dict(
        base_url=str(ctx.client.base_url) if ctx.client is not None else m.base_url,
        model=ctx.model,
        timeout=m.timeout,
        max_retries=m.max_retries,
        retry_backoff_seconds=m.retry_backoff_seconds,
        temperature=temperature,
        top_p=top_p,
        max_tokens=max_tokens,
        send_seed=m.send_seed,
        tool_choice=m.tool_choice,
        extra_body=extra_body,
        seed_mod_2_32=m.seed_mod_2_32,
    )
    builder = ChatModelClient(api_key_env=None, checkpoint_id=m.checkpoint_id, trust_env=False, **settings)
    identity = model_identity(checkpoint_id=m.checkpoint_id, **settings)
    identity["transport"]["via"] = "verifiers-interception"
    return builder, identity


def episode_summary(record: dict[str, Any]) -> dict[str, Any]:
    """What the verifiers trace keeps of our record: ids, status, reward and its detail, step counts."""
    final = record.get("final") or {}
    detail = final.get("reward_detail") or {}
    steps = record.get("steps") or []
    reward = final.get("reward") if record.get("status") == "completed" else None
    return {
        "episode_id": record["episode_id"],
        "job": record["job"],
        "status": record["status"],
        "reward": reward,
        "r_success": detail.get("r_success"),
        "termination_reason": final.get("termination_reason"),
        "steps": len(steps),
        "protocol_errors": sum(1 for step in steps if step.get("protocol_error")),
        "error": record.get("error"),
    }


class ShopSimEnvConfig(vf.EnvConfig):  # type: ignore[misc]
    """One agent seat; the harness runs in this process (no container, no sandbox to provision)."""

    agent: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())


class ShopSimEnv(vf.Env[ShopSimEnvConfig]):  # type: ignore[misc]
    """The single-agent env of the ShopSimulator taskset; holds one environment client per eval."""

    async def start(self) -> None:
        """Open the environment client (mode evaluate) or the training session (mode train) of the eval YAML."""
        config = self.taskset.config
        plan = self.taskset.plan
        path = str(Path(config.config).resolve())
        if config.mode == "train":
            from shopsimrl_core._errors import ConfigError
            from shopsimrl_core.training._session import TrainingSession

            if not config.out_dir:
                raise ConfigError(f"{PLUGIN_ID}: mode train needs env.taskset.out_dir (the training session's "
                                  "folder); pass --env.taskset.out-dir PATH", code="config-invalid")
            session = TrainingSession.from_config(
                plan.config, backend=None, out_dir=config.out_dir, group_size=config.group_size,
                curriculum=config.curriculum, diagnostic_retry=config.diagnostic_retry, adapter="verifiers")
            await session.__aenter__()
            _OPEN[path] = _Evaluation(path=path, plan=plan, session=session)
            return
        env = _environment_client(plan)
        await env.__aenter__()
        _OPEN[path] = _Evaluation(path=path, plan=plan, env=env)

    async def stop(self) -> None:
        """Close what :meth:`start` opened (tolerates a start that failed part way)."""
        path = str(Path(self.taskset.config.config).resolve())
        evaluation = _OPEN.pop(path, None)
        if evaluation is not None and evaluation.env is not None:
            await evaluation.env.aclose()
        if evaluation is not None and evaluation.session is not None:
            await evaluation.session.__aexit__(None, None, None)

    async def run(self, task: Any, agents: Any) -> None:
        """One episode: the one seat plays the task."""
        await agents.agent.run(task)

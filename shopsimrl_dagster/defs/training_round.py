"""A training round in Dagster: inputs → the trainer (Dagster Pipes) → triage → the analysts.

Partitioned by round (``training_rounds``), left to right in the UI::

    round_inputs[r] → round_training[r] → round_triage[r] → round_online_analysis[r]
        → round_candidate_pool[r] → round_online_gate[r] → round_selected_bank[r] → round_curriculum[r]
        → round_inputs[r+1] (reads round r's selected bank and curriculum)

``round_inputs`` freezes what the trainer reads (the curriculum of the selected bank, the bank, the task
data of ``export_slime_tasks``, the round's training YAML) and runs the training preflight as a blocking
check. ``round_training`` runs the trainer of the pipeline settings' ``training.command`` through Dagster
Pipes under ``shopsimrl_pipes.group`` (its own process group, stopped whole on Terminate); the trainer
registers each checkpoint it writes, so the registry sensor evaluates it on val while the round runs.
``round_triage`` reads the round's triage documents, ``round_online_analysis`` audits exactly the
round's "full-skill failure pending analysis" episodes. The round sensor (``round_sensor``) starts the
trainer after ``round_inputs`` materialized with a passing preflight and the gate after the analysis,
so one materialization of ``round_inputs`` runs the whole round (docs/research.md, "A training round").
"""


import html
import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import yaml

from ..registry import read_registry
from ..settings import PipelineSettings
from ..training_settings import TrainingSettings, fill_training_command
from .checks import check_spec
from .failures import as_failure
from .optional import optional_asset
from .research import POOL, AnalystEndpoint, training_rounds
from .resources import RunStorage

__all__ = ["build_training_round_assets", "build_training_round_jobs", "build_round_sensor", "ROUND_KEYS",
           "round_paths"]

_GROUP = "research"
ROUND_KEYS = tuple(dg.AssetKey(n) for n in ("round_inputs", "round_training", "round_triage",
                                            "round_online_analysis"))
INPUTS, TRAINING, TRIAGE, ONLINE = ROUND_KEYS
REPORT = dg.AssetKey("round_wandb")
PREFLIGHT = "training_preflight"


class RoundPaths:
    """Every file of round *round_id* below ``<runs_root>/rounds/<round_id>/``."""

    def __init__(self, root: Path, round_id: str) -> None:
        self.round_id = round_id
        self.dir = root / "rounds" / round_id
        self.inputs = self.dir / "inputs"
        self.curriculum = self.inputs / "curriculum.json"
        self.skillbank = self.inputs / "skillbank.json"
        self.task_data = self.inputs / "slime_tasks.jsonl"
        self.training_config = self.inputs / "training.yaml"
        self.preflight = self.inputs / "preflight.json"
        self.out_dir = self.dir / "training"
        self.checkpoint_dir = self.dir / "checkpoints"
        self.trainer_status = self.dir / "trainer_status.json"
        self.progress = self.dir / "training_progress.json"
        self.triage = self.dir / "triage_summary.json"
        self.online = self.dir / "online_analysis"
        self.candidates = self.online / "trace2skill_candidates.json"


def round_paths(run_storage: RunStorage, round_id: str) -> RoundPaths:
    """The files of *round_id* under the runs root of *run_storage*."""
    return RoundPaths(run_storage.root_path, round_id)


class RoundInputsConfig(dg.Config):
    """Where round inputs come from; empty = the previous round's selected bank and curriculum."""

    curriculum: str = ""
    """A frozen curriculum (``shopsimrl-skill-curriculum-v1``); empty: the previous round's, else
    ``training.initial_curriculum``."""
    skillbank: str = ""
    """The SkillBank the curriculum was built from; empty: the one the curriculum names."""
    previous_round: str = ""
    """The round whose selected bank this round trains on; empty: the round added before this one."""


def _training(settings: PipelineSettings) -> TrainingSettings:
    if settings.training is None:
        raise dg.Failure(description=f"{settings.source}: training: not configured; add a training section "
                         "(docs/pipeline.md, \"Training rounds\")", allow_retries=False)
    return settings.training


def _previous_round(context: dg.AssetExecutionContext, config: RoundInputsConfig) -> str | None:
    if config.previous_round:
        return config.previous_round
    keys = list(context.instance.get_dynamic_partitions(training_rounds.name or "training_rounds"))
    here = keys.index(context.partition_key) if context.partition_key in keys else len(keys)
    return keys[here - 1] if here > 0 else None


def _resolve_inputs(context: dg.AssetExecutionContext, config: RoundInputsConfig, run_storage: RunStorage,
                    training: TrainingSettings) -> tuple[Path, Path]:
    """(curriculum, skillbank) of the round: given, the previous round's, or the settings' first ones."""
    def given(value: str) -> Path:
        path = Path(value)
        return path if path.is_absolute() else run_storage.root_path / path

    if config.curriculum:
        curriculum = given(config.curriculum)
    else:
        previous = _previous_round(context, config)
        candidate = run_storage.root_path / "rounds" / previous / "curriculum.json" if previous else None
        if candidate is not None and candidate.is_file():
            curriculum = candidate
        elif previous is None and training.initial_curriculum is not None:
            curriculum = training.initial_curriculum
        else:
            # never the first round's curriculum in silence for a later round whose predecessor selected nothing
            raise dg.Failure(description=(
                f"round {context.partition_key}: no curriculum — "
                + (f"the previous round {previous!r} has no round_curriculum (its gate has not run or selected "
                   "nothing); materialize it, or give round_inputs config curriculum and skillbank"
                   if previous else "this is the first round and training.initial_curriculum is not set; set it")),
                allow_retries=False)
    if config.skillbank:
        return curriculum, given(config.skillbank)
    try:
        state = json.loads(curriculum.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise dg.Failure(description=f"{curriculum}: cannot read the curriculum ({exc})", allow_retries=False) from None
    named = (state.get("source") or {}).get("skillbank_path")
    if named and (curriculum.parent / Path(named).name).is_file():
        return curriculum, curriculum.parent / Path(named).name
    if training.initial_skillbank is not None:
        return curriculum, training.initial_skillbank
    raise dg.Failure(description=f"{curriculum}: names no SkillBank beside it ({named!r}); give round_inputs "
                     "config skillbank or training.initial_skillbank", allow_retries=False)


def _write_training_yaml(paths: RoundPaths, training: TrainingSettings) -> None:
    document = {"evaluation": str(training.evaluation), "out_dir": str(paths.out_dir),
                "group_size": training.group_size, "diagnostic_retry": training.diagnostic_retry,
                "adapter": training.adapter, "sampling": dict(training.sampling), "backend": dict(training.backend),
                "curriculum": str(paths.curriculum), "skillbank": str(paths.skillbank),
                "task_data": str(paths.task_data)}
    paths.training_config.write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True), encoding="utf-8")


def _round_checkpoints(settings: PipelineSettings, round_id: str) -> list[Any]:
    from shopsimrl_pipes import checkpoint_id_for

    prefix = checkpoint_id_for(round_id, 0)[: -len("000000")]
    return [c for c in read_registry(settings.checkpoint_registry, problems=[]) if c.checkpoint_id.startswith(prefix)]


def _pipes_client(training: TrainingSettings, settings: PipelineSettings) -> Any:
    cwd = str(training.cwd or (settings.source.parent if settings.source else Path.cwd()))
    if training.pipes_client == "k8s":
        from dagster_k8s import PipesK8sClient  # the [kubernetes] extra; docs/scaling.md

        return PipesK8sClient(env=dict(training.env))
    # the supervisor stops the trainer's group within stop_timeout_s; the client waits a little longer for it
    return dg.PipesSubprocessClient(env=dict(training.env), cwd=cwd, forward_termination=True,
                                    termination_timeout_seconds=training.stop_timeout_s + 10)


def _shown(command: list[str], limit: int = 200) -> str:
    text = " ".join(command)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _viewer_link(settings: PipelineSettings, round_id: str, episode_id: str) -> str:
    base = settings.viewer.base_url.rstrip("/")
    url = f"{base}/run/rounds/{round_id}/training/episode/{episode_id}"
    return f"[{html.escape(episode_id)}]({html.escape(url, quote=True)})"


def build_training_round_assets(settings: PipelineSettings) -> list[dg.AssetsDefinition]:
    """The four round assets of the module docstring, for the ``training`` section of *settings*."""

    @dg.multi_asset(
        name="round_inputs", partitions_def=training_rounds, can_subset=False,
        specs=[dg.AssetSpec(INPUTS, group_name=_GROUP, kinds={"json", "yaml"}, description=(
            "What the round's trainer reads: the curriculum of the selected bank, the bank, the task data "
            "(export_slime_tasks) and the training YAML; the training preflight blocks the trainer."))],
        check_specs=[check_spec(PREFLIGHT, INPUTS, "shopsimrl training preflight of the round's training YAML: "
                                "curriculum = bank, task data = train split, /healthz, exact-token probe.",
                                training_rounds)])
    def round_inputs(context: dg.AssetExecutionContext, config: RoundInputsConfig,
                     run_storage: RunStorage) -> Iterator[Any]:
        from shopsimrl_core import export_slime_tasks
        from shopsimrl_core.runs.config._config import load_config
        from shopsimrl_core.training._preflight import training_preflight

        training = _training(settings)
        paths = round_paths(run_storage, context.partition_key)
        curriculum, skillbank = _resolve_inputs(context, config, run_storage, training)
        paths.inputs.mkdir(parents=True, exist_ok=True)
        with as_failure():
            if curriculum.resolve() != paths.curriculum.resolve():
                shutil.copyfile(curriculum, paths.curriculum)
            if skillbank.resolve() != paths.skillbank.resolve():
                shutil.copyfile(skillbank, paths.skillbank)
            state = json.loads(paths.curriculum.read_text(encoding="utf-8"))
            evaluation = load_config(training.evaluation)
            export_slime_tasks(evaluation.tasks.split_file, evaluation.tasks.split, paths.task_data,
                               curriculum=state)
            _write_training_yaml(paths, training)
            report = training_preflight(paths.training_config)
        paths.preflight.write_text(json.dumps({"ok": report.ok, "problems": report.problems,
                                               "checked": report.checked}, indent=2), encoding="utf-8")
        for line in report.problems:
            context.log.error(f"preflight: {line}")
        tasks = sum(1 for line in paths.task_data.read_text(encoding="utf-8").splitlines() if line.strip())
        yield dg.MaterializeResult(asset_key=INPUTS, metadata={
            "training_config": dg.MetadataValue.path(str(paths.training_config)),
            "curriculum": dg.MetadataValue.path(str(paths.curriculum)), "state_id": str(state.get("state_id")),
            "bank_sha256": str((state.get("source") or {}).get("skillbank_sha256")),
            "chunks": [c.get("skill_id") for c in state.get("chunks") or []],
            "task_data": dg.MetadataValue.path(str(paths.task_data)), "tasks": tasks,
            "preflight_ok": report.ok})
        yield dg.AssetCheckResult(check_name=PREFLIGHT, asset_key=INPUTS, passed=report.ok, metadata={
            "problems": dg.MetadataValue.md("\n".join(f"- {html.escape(p)}" for p in report.problems) or "none"),
            "checked": len(report.checked)})

    @dg.asset(key=TRAINING, deps=[INPUTS], group_name=_GROUP, partitions_def=training_rounds,
              kinds={"python"}, description=(
                  "The trainer (training.command) as a Dagster Pipes process: per-step reward, success, frontier "
                  "share and tokens/s; each checkpoint it writes is registered and evaluated on val."))
    def round_training(context: dg.AssetExecutionContext, run_storage: RunStorage) -> dg.MaterializeResult:
        from dagster._core.errors import DagsterPipesExecutionError  # private: no public Pipes error type in 1.13

        training = _training(settings)
        paths = round_paths(run_storage, context.partition_key)
        try:
            preflight = json.loads(paths.preflight.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            preflight = {"ok": False, "problems": [f"{paths.preflight}: missing; materialize round_inputs first"]}
        if not preflight.get("ok"):
            raise dg.Failure(description=(
                f"round {context.partition_key}: the training preflight failed, so the trainer was not started: "
                + "; ".join(preflight.get("problems") or [])), allow_retries=False)
        before = _round_checkpoints(settings, context.partition_key)
        last = max(before, key=lambda c: c.step, default=None)
        takes_resume = any("{resume_from}" in argument for argument in training.command)
        resume_from = last.weights if (last is not None and training.resume and takes_resume) else None
        if last is not None and not resume_from:
            context.log.warning(
                f"round {context.partition_key} already registered {last.checkpoint_id}; the trainer command "
                + ("takes no {resume_from}, so it starts the round again from its beginning"
                   if not takes_resume else "is not resumed (training.resume: false)"))
        elif resume_from:
            context.log.info(f"resuming the round from {last.checkpoint_id if last else '?'} ({resume_from})")
        paths.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        values = {"python": sys.executable, "round": context.partition_key, "round_dir": str(paths.dir),
                  "training_config": str(paths.training_config), "out_dir": str(paths.out_dir),
                  "checkpoint_dir": str(paths.checkpoint_dir), "resume_from": resume_from or "",
                  "curriculum": str(paths.curriculum), "task_data": str(paths.task_data),
                  "registry": str(settings.checkpoint_registry)}
        trainer = fill_training_command(training.command, values)
        extras = {**{k: v for k, v in values.items() if k != "python"}, "resume_from": resume_from,
                  "wandb": training.wandb.model_dump(mode="json") if training.wandb else None}
        paths.trainer_status.unlink(missing_ok=True)
        command = [sys.executable, "-m", "shopsimrl_pipes.group", "--stop-timeout", str(training.stop_timeout_s),
                   "--status", str(paths.trainer_status), "--", *trainer]
        context.log.info(f"starting the trainer: {' '.join(trainer)}")
        client = _pipes_client(training, settings)
        try:
            if training.pipes_client == "k8s":
                # the trainer's pod: its first container gets training.k8s.resources (GPU requests)
                spec = dict(training.k8s.get("base_pod_spec") or {})
                if training.k8s.get("resources"):
                    containers = list(spec.get("containers") or [{}])
                    containers[0] = {**containers[0], "resources": training.k8s["resources"]}
                    spec["containers"] = containers
                invocation = client.run(context=context, extras=extras, image=training.k8s["image"],
                                        command=trainer, namespace=training.k8s.get("namespace"),
                                        base_pod_spec=spec or None, base_pod_meta=training.k8s.get("base_pod_meta"))
            else:
                invocation = client.run(context=context, command=command, extras=extras)
        except DagsterPipesExecutionError as exc:
            registered = [c.checkpoint_id for c in _round_checkpoints(settings, context.partition_key)]
            try:
                status = json.loads(paths.trainer_status.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                status = {}
            how = (f"was killed by {status['signal']}" if status.get("signal")
                   else f"exited with code {status.get('returncode', '?')}")
            raise dg.Failure(description=(
                f"[trainer-failed] the trainer `{_shown(trainer)}` (pid {status.get('pid', '?')}) {how}; checkpoints "
                f"registered by this round: {', '.join(registered) or 'none'} — materialize round_training again "
                "to resume from the last one" + ("" if takes_resume else " (this command takes no {resume_from})")
            ), allow_retries=False) from exc
        messages = invocation.get_custom_messages()
        steps = [m for m in messages if isinstance(m, dict) and m.get("kind") == "shopsimrl-trainer-step-v1"]
        checkpoints = [m for m in messages if isinstance(m, dict)
                       and m.get("kind") == "shopsimrl-trainer-checkpoint-v1"]
        for record in steps:  # one observation per step: Dagster's plots of the asset show the series
            context.log_event(dg.AssetObservation(
                asset_key=TRAINING, partition=context.partition_key,
                metadata={k: v for k, v in record.items() if k in ("step", "reward", "success", "frontier_share",
                                                                   "tokens_per_s") and v is not None}))
        progress = {"round_id": context.partition_key, "steps": steps, "checkpoints": checkpoints,
                    "resumed_from": resume_from}
        paths.progress.write_text(json.dumps(progress, indent=2), encoding="utf-8")
        reported = invocation.get_materialize_result()
        last = steps[-1] if steps else {}
        shown = ", ".join(f"{key} {last[key]:.3g}" for key in ("reward", "success", "frontier_share", "tokens_per_s")
                          if isinstance(last.get(key), (int, float)))
        # the verdict first, rounded, as text; the trainer's own values and the series follow
        metadata: dict[str, Any] = {"verdict": f"{len(steps)} steps, {len(checkpoints)} checkpoints registered"
                                               + (f"; last step {last.get('step')}: {shown}" if shown else "")}
        metadata.update(reported.metadata or {})
        metadata.update({
            "trainer": " ".join(trainer), "steps_reported": len(steps),
            "checkpoints": [c["checkpoint_id"] for c in checkpoints],
            "resumed_from": resume_from or "none",
            "progress": dg.MetadataValue.json({"steps": [{k: r.get(k) for k in ("step", "reward", "success",
                                                                                 "frontier_share", "tokens_per_s")}
                                                         for r in steps]})})
        return dg.MaterializeResult(metadata=metadata)

    @dg.asset(key=TRIAGE, deps=[TRAINING], group_name=_GROUP, partitions_def=training_rounds, kinds={"json"},
              description="The round's group triage: classification counts, frontier share, the pending-analysis "
                          "episodes (links into the viewer).")
    def round_triage(context: dg.AssetExecutionContext, run_storage: RunStorage) -> dg.MaterializeResult:
        from shopsimrl_core.training._summary import summarize_training

        paths = round_paths(run_storage, context.partition_key)
        with as_failure():
            [summary] = summarize_training(paths.out_dir)
        paths.triage.write_text(json.dumps(summary, indent=2), encoding="utf-8")
        pending = summary["pending_analysis_episode_ids"]
        links = "\n".join(f"- {_viewer_link(settings, context.partition_key, e)}" for e in pending)
        return dg.MaterializeResult(metadata={
            "groups": summary["groups"], "episodes": summary["episodes"],
            "frontier_share": summary["frontier_share"] if summary["frontier_share"] is not None else 0.0,
            "classifications": dg.MetadataValue.json(summary["classifications"]),
            **{f"class/{name}": count for name, count in summary["classifications"].items()},
            "success_histogram": dg.MetadataValue.json(summary["success_histogram"]),
            "abort_rate": summary["abort_rate"] if summary["abort_rate"] is not None else 0.0,
            "tokens_per_second": summary["tokens_per_second"] or 0.0,
            "pending_analysis": len(pending),
            "pending_analysis_episodes": dg.MetadataValue.md(links or "none"),
            "round_in_viewer": dg.MetadataValue.url(
                f"{settings.viewer.base_url.rstrip('/')}/round/rounds/{context.partition_key}/training")})

    @optional_asset(ONLINE, name="round_online_analysis", deps=[TRIAGE], group=_GROUP,
                    partitions_def=training_rounds, kinds={"json"},
                    description="Trace2Skill online failure analysis of exactly the round's full-skill failures "
                                "pending analysis; its candidates feed the round's pool and gate.")
    def round_online_analysis(context: dg.AssetExecutionContext, run_storage: RunStorage,
                              analyst: AnalystEndpoint) -> Iterator[Any]:
        from shopsimrl_core.skills import Trace2SkillConfig, run_online_failure_analysis
        from shopsimrl_core.skills.trace2skill._online import pending_analysis_episodes

        training = _training(settings)
        paths = round_paths(run_storage, context.partition_key)
        with as_failure():
            episodes = pending_analysis_episodes(paths.out_dir)
        if not episodes:
            context.log.info("round_online_analysis not materialized: the round has no full-skill failure pending "
                             "analysis (every failed group was fixed by the skill text or is on the frontier)")
            return
        analyst.health_check()
        bank = json.loads(paths.skillbank.read_text(encoding="utf-8"))
        checkpoints = _round_checkpoints(settings, context.partition_key)
        proposal = max(checkpoints, key=lambda c: c.step).checkpoint_id if checkpoints else context.partition_key
        env = settings.environment
        with as_failure():
            document = run_online_failure_analysis(
                Trace2SkillConfig(traces=paths.out_dir / "traces.jsonl", output_dir=paths.online,
                                  environment_url=env.base_url, environment_timeout=env.timeout_s,
                                  analyst=analyst.model()),
                bank, round_id=context.partition_key, proposal_checkpoint=proposal,
                max_candidates=training.gate.max_candidates if training.gate else 6, episode_ids=episodes)
        yield dg.MaterializeResult(asset_key=ONLINE, metadata={
            "input_episodes": len(document.get("input_episode_ids") or []),
            "failures_audited": document["failures_audited"], "eligible_cards": document["eligible_cards"],
            "proposals": len(document.get("proposals") or []), "proposal_checkpoint": proposal,
            "candidates": dg.MetadataValue.path(str(paths.candidates))})

    report = [build_round_report_asset(settings)] if settings.training and settings.training.wandb else []
    return [round_inputs, round_training, round_triage, round_online_analysis, *report]


def build_training_round_jobs(settings: PipelineSettings) -> list[Any]:
    """The round jobs the round sensor starts.

    ``round_trainer``: trainer, triage and online analysis of one round; with ``training.wandb``,
    ``round_report``: the round's W&B report.
    """
    jobs = [dg.define_asset_job("round_trainer", selection=dg.AssetSelection.assets(TRAINING, TRIAGE, ONLINE),
                                description="A round's trainer (Pipes), triage and online analysis.")]
    if settings.training is not None and settings.training.wandb is not None:
        jobs.append(dg.define_asset_job("round_report", selection=dg.AssetSelection.assets(REPORT),
                                        description="The round reported to Weights & Biases."))
    return jobs


def build_round_report_asset(settings: PipelineSettings) -> dg.AssetsDefinition:
    """``round_wandb``: the round in W&B (``shopsimrl_dagster/wandb_report.py``); only with ``training.wandb``."""

    @dg.asset(key=REPORT, deps=[dg.AssetKey("round_curriculum")], group_name=_GROUP, partitions_def=training_rounds,
              kinds={"wandb"}, description="The round reported to Weights & Biases: eval series by training step, "
                                           "trainer progress, triage, analysis, the gate's table, the files.")
    def round_wandb(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        from ..wandb_report import report_round

        logged = report_round(settings, context.partition_key, _round_checkpoints(settings, context.partition_key))
        return dg.MaterializeResult(metadata={
            "wandb_run_dir": dg.MetadataValue.path(str(logged["run_dir"])), "train_steps": logged["steps"],
            "evaluated": dg.MetadataValue.json(logged["evaluated"]), "checkpoints_evaluated": len(logged["evaluated"]),
            "gate_rows": logged["gate_rows"], "files": logged["files"]})

    return round_wandb


def _latest(instance: dg.DagsterInstance, key: dg.AssetKey, partition: str) -> Any:
    result = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition]),
                                             limit=1)
    return result.records[0] if result.records else None


def _handled(instance: dg.DagsterInstance, key: dg.AssetKey, partition: str, upstream: Any) -> bool:
    """Whether *key*[partition] already follows *upstream* (a materialization record).

    True when it was materialized after it, or a run that materializes it is under way: a round materialized
    by hand in one run is not run twice.
    """
    latest = _latest(instance, key, partition)
    if latest is not None and latest.storage_id > upstream.storage_id:
        return True
    running = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/partition": partition},
                                                      statuses=_IN_PROGRESS))
    return any(key in (run.asset_selection or set()) or run.job_name in _JOBS_OF.get(key.to_user_string(), ())
               for run in running)


_IN_PROGRESS = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
                dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]
_JOBS_OF = {"round_training": ("round_trainer",), "round_candidate_pool": ("training_round",)}


def gate_run_config(settings: PipelineSettings, run_storage_root: Path, round_id: str) -> dict[str, Any]:
    """The run config of the existing ``training_round`` job (pool → gate → bank → curriculum) for a round."""
    training = _training(settings)
    assert training.gate is not None
    paths = RoundPaths(run_storage_root, round_id)
    checkpoints = _round_checkpoints(settings, round_id)
    config = {"active_skillbank": str(paths.skillbank), "candidates": str(paths.candidates),
              "experiment_config": str(training.gate.experiment_config),
              "bare_run_dir": str(training.gate.bare_run_dir),
              "proposal_checkpoint": max(checkpoints, key=lambda c: c.step).checkpoint_id if checkpoints else round_id,
              "max_candidates": training.gate.max_candidates,
              "active_skill_budget": training.gate.active_skill_budget,
              "selection_rule": training.gate.selection_rule}
    return {"ops": {name: {"config": config} for name in ("round_candidate_pool", "round_online_gate",
                                                          "round_curriculum")}}


def build_round_sensor(settings: PipelineSettings, jobs: list[Any]) -> dg.SensorDefinition:
    """``round_sensor``: runs a round on from ``round_inputs`` without a click.

    After ``round_inputs`` (preflight passed) it starts ``round_trainer``; after ``round_online_analysis``
    it starts ``training_round`` (pool, gate, bank, curriculum) with the round's config.

    With ``training.wandb``, after ``round_curriculum`` (and again as the round's checkpoints get evaluated)
    it starts ``round_report``. One run per materialization (its storage id is in the run key), so a
    re-materialized input runs again. *jobs* are the job definitions it targets.
    """

    @dg.sensor(name="round_sensor", jobs=jobs, minimum_interval_seconds=settings.automation.sensor_interval_s,
               default_status=(dg.DefaultSensorStatus.RUNNING if settings.automation.sensor_running
                               else dg.DefaultSensorStatus.STOPPED),
               description="Runs a training round on from round_inputs: the trainer, then the gate.")
    def round_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        requests: list[dg.RunRequest] = []
        for round_id in context.instance.get_dynamic_partitions("training_rounds"):
            inputs = _latest(context.instance, INPUTS, round_id)
            if inputs is not None:
                meta = inputs.event_log_entry.asset_materialization.metadata
                ok = meta.get("preflight_ok")
                if ok is not None and ok.value is True and not _handled(context.instance, TRAINING, round_id, inputs):
                    requests.append(dg.RunRequest(job_name="round_trainer", partition_key=round_id,
                                                  run_key=f"round-trainer-{round_id}-{inputs.storage_id}"))
            online = _latest(context.instance, ONLINE, round_id)
            if (online is not None and settings.training is not None and settings.training.gate is not None
                    and not _handled(context.instance, POOL, round_id, online)):
                requests.append(dg.RunRequest(
                    job_name="training_round", partition_key=round_id,
                    run_key=f"round-gate-{round_id}-{online.storage_id}",
                    run_config=gate_run_config(settings, settings.runs_root, round_id)))
            curriculum = _latest(context.instance, dg.AssetKey("round_curriculum"), round_id)
            if curriculum is not None and settings.training is not None and settings.training.wandb is not None:
                # again whenever another summary or comparison of the round's checkpoints has been written
                folders = [settings.runs_root / settings.skills.val_suite / c.checkpoint_id
                           for c in _round_checkpoints(settings, round_id)]
                evaluated = sum((f / "summary.json").is_file() + len(list(f.glob("comparison_vs_*.json")))
                                for f in folders)
                requests.append(dg.RunRequest(job_name="round_report", partition_key=round_id,
                                              run_key=f"round-report-{round_id}-{curriculum.storage_id}-{evaluated}"))
        if not requests:
            return dg.SkipReason("no round input or online analysis waiting")
        return dg.SensorResult(run_requests=requests)

    return round_sensor

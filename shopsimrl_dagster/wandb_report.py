"""A training round reported to Weights & Biases (``training.wandb``; the optional ``[wandb]`` extra).

One W&B run per round (id ``shopsimrl-<round>``, grouped by ``training.wandb.group`` or the round id), so a
lab sees the round's evaluation curves beside its training curves:

- ``train/reward``, ``train/success``, ``train/frontier_share``, ``train/tokens_per_s`` per trainer step
  (what the trainer reported through Pipes), x = ``train_step``;
- ``eval/<val suite>/reward`` and ``eval/<val suite>/success_rate`` of each of the round's checkpoints, the
  numbers ``<suite>/eval_summary`` shows as metadata, and ``eval/<val suite>/delta_reward`` /
  ``delta_r_success`` of its paired comparison with the checkpoint before it (``checkpoint_comparison``'s
  ``delta_<metric>``), x = the checkpoint's training step;
- the triage counts, the online analysis counts, the gate's coefficients table (one row per intervention)
  and its selected chunks;
- the round's files as one artifact (``round-<round>``), and copied into the run's files under
  ``<round>/``: training progress, triage summary, online analysis and candidates, pool, gate manifest and
  contributions, selected bank, curriculum.

Nothing is imported or written unless ``training.wandb`` is set. The API key is read by the ``wandb``
package from the variable ``api_key_env`` names (online mode); it is never written or logged here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

from .settings import PipelineSettings

__all__ = ["report_round", "round_files"]


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def round_files(round_dir: Path) -> list[Path]:
    """The files of a finished round that go into its W&B artifact (those that exist)."""
    names = ["training_progress.json", "triage_summary.json", "online_analysis/online_failure_analysis.json",
             "online_analysis/trace2skill_candidates.json", "curriculum.json", "inputs/curriculum.json",
             "inputs/skillbank.json"]
    found = [round_dir / name for name in names if (round_dir / name).is_file()]
    for pattern in ("candidate_pool*.json", "online_gate/*.json", "skillbank-*.json"):
        found.extend(sorted(p for p in round_dir.glob(pattern) if p.is_file()))
    return list(dict.fromkeys(found))


def report_round(settings: PipelineSettings, round_id: str, checkpoints: list[Any]) -> dict[str, Any]:
    """Log round *round_id* to W&B (module docstring); return what was logged (counts, run dir).

    *checkpoints* are the round's registry entries (``checkpoint_id``, ``step``).

    Raises:
        ImportError: ``training.wandb`` is set but the ``wandb`` package is missing (install ``shopsimrl[wandb]``).
    """
    assert settings.training is not None and settings.training.wandb is not None
    config = settings.training.wandb
    import wandb  # the optional [wandb] extra; imported only when training.wandb is set

    root = settings.runs_root
    round_dir = root / "rounds" / round_id
    directory = config.dir or (root / "wandb")
    directory.mkdir(parents=True, exist_ok=True)
    modes: dict[str, Literal["online", "offline", "disabled"]] = {
        "online": "online", "offline": "offline", "disabled": "disabled", "dryrun": "offline", "run": "online"}
    chosen = os.environ.get("WANDB_MODE") or config.mode
    if chosen not in modes:
        raise ValueError(f"WANDB_MODE={chosen!r}: not a W&B mode; use online, offline or disabled")
    mode = modes[chosen]
    val = settings.skills.val_suite
    run = wandb.init(project=config.project, entity=config.entity, group=config.group or round_id,
                     id=f"shopsimrl-{round_id}", name=f"round {round_id}", job_type="training-round",
                     dir=str(directory), mode=mode, resume="allow",
                     config={"round_id": round_id, "val_suite": val,
                             "trainer": " ".join(settings.training.command)})
    try:
        run.define_metric("train_step")
        run.define_metric("train/*", step_metric="train_step")
        run.define_metric(f"eval/{val}/*", step_metric="train_step")
        progress = _read(round_dir / "training_progress.json") or {}
        logged_steps = 0
        for record in progress.get("steps") or []:
            values = {f"train/{k}": record[k] for k in ("reward", "success", "frontier_share", "tokens_per_s")
                      if record.get(k) is not None}
            run.log({"train_step": record["step"], **values})
            logged_steps += 1
        evaluated: dict[str, dict[str, float]] = {}
        for checkpoint in sorted(checkpoints, key=lambda c: c.step):
            summary = _read(root / val / checkpoint.checkpoint_id / "summary.json")
            primary = (summary or {}).get("primary") or {}
            if primary.get("reward_mean") is None:
                continue  # not evaluated yet: the next report of the round logs it
            values = {f"eval/{val}/reward": primary["reward_mean"],
                      f"eval/{val}/success_rate": primary.get("success_rate")}
            # the paired comparison with the checkpoint before it (checkpoint_comparison's delta_<metric>)
            for path in sorted((root / val / checkpoint.checkpoint_id).glob("comparison_vs_*.json")):
                metrics = ((_read(path) or {}).get("paired") or {}).get("metrics") or {}
                for metric in ("reward", "r_success"):
                    difference = (metrics.get(metric) or {}).get("mean_difference")
                    if isinstance(difference, (int, float)):
                        values[f"eval/{val}/delta_{metric}"] = difference
            run.log({"train_step": checkpoint.step, **{k: v for k, v in values.items() if v is not None}})
            evaluated[checkpoint.checkpoint_id] = {k: v for k, v in values.items() if v is not None}
        triage = _read(round_dir / "triage_summary.json") or {}
        online = _read(round_dir / "online_analysis" / "online_failure_analysis.json") or {}
        contributions = _read(round_dir / "online_gate" / "contributions.json") or {}
        summary_values: dict[str, Any] = {
            **{f"triage/{k}": v for k, v in (triage.get("classifications") or {}).items()},
            "triage/groups": triage.get("groups"), "triage/frontier_share": triage.get("frontier_share"),
            "analysis/failures_audited": online.get("failures_audited"),
            "analysis/proposals": len(online.get("proposals") or []),
            "gate/selected": ", ".join(contributions.get("selected_intervention_ids") or []),
            "gate/selected_count": contributions.get("selected_count"),
        }
        run.summary.update({k: v for k, v in summary_values.items() if v is not None})
        rows = [[c.get("intervention_id"), c.get("kind"), c.get("operation"), c.get("coefficient"), c.get("rank"),
                 c.get("status")] for c in contributions.get("contributions") or []]
        if rows:
            run.log({"gate/coefficients": wandb.Table(
                columns=["intervention_id", "kind", "operation", "coefficient", "rank", "status"], data=rows)})
        files = round_files(round_dir)
        if files:
            artifact = wandb.Artifact(f"round-{round_id}", type="training-round")
            for path in files:
                artifact.add_file(str(path), name=str(path.relative_to(round_dir)))
                # a copy in the run's own files too: an offline run folder then holds them as they were
                run.save(str(path), base_path=str(round_dir.parent), policy="now")
            run.log_artifact(artifact)
        return {"run_dir": run.dir, "steps": logged_steps, "evaluated": evaluated, "gate_rows": len(rows),
                "files": [str(p.relative_to(round_dir)) for p in files]}
    finally:
        run.finish()

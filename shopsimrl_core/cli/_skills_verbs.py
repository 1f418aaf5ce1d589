"""The skills-layer verbs of ``shopsimrl``: exports, labels, candidates, the gates and snapshots.

Registered through ``cli._main._EXTENSIONS``; each verb is a thin shell over a public function of
``export``, ``analysis`` or ``skills`` and prints its result as JSON on stdout.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from shopsimrl_core._errors import ShopSimRLError
from shopsimrl_core.cli._arg_types import positive
from shopsimrl_core.cli._inputs import require_input_file, require_output_dir, require_output_file, require_run_dir
from shopsimrl_core.export._records import PROFILES, export_sft, export_traces

__all__ = ["register_skills_cli"]


def _print(value: Any) -> None:
    print(json.dumps(value, ensure_ascii=False, indent=2))


def _cmd_traces(args: argparse.Namespace) -> int:
    require_run_dir(args.run_dir)
    require_output_file(args.out, "the export's output")
    result = export_traces(args.run_dir, args.out, profile=args.profile, all_attempts=args.all_attempts)
    _print({"path": str(result.path), "records": result.records, "profile": args.profile})
    return 0


def _cmd_sft(args: argparse.Namespace) -> int:
    if len(args.paths) < 2:
        raise ShopSimRLError(
            "shopsimrl export sft: give one or more run directories followed by the output file; see "
            "`shopsimrl export sft --help`",
            code="usage",
        )
    for run_dir in args.paths[:-1]:
        require_run_dir(run_dir)
    require_output_file(args.paths[-1], "the SFT output")
    result = export_sft(args.paths[:-1], args.paths[-1], with_reasoning=args.with_reasoning,
                        allow_protocol_errors=args.allow_protocol_errors,
                        min_r_success=0 if args.include_failures else 1)
    _print({"path": str(result.path), "records": result.records, "skipped": result.skipped})
    return 0


def _cmd_labels(args: argparse.Namespace) -> int:
    from shopsimrl_core.analysis._labels import label_run

    require_run_dir(args.run_dir)
    if args.out is not None:
        require_output_file(args.out, "--out")
    table = label_run(args.run_dir, out_path=args.out)
    _print({"path": str(table.path), "episodes": table.episodes, "sha256": table.sha256,
            "distribution": table.distribution})
    return 0


def _cmd_candidates(args: argparse.Namespace) -> int:
    from shopsimrl_core.skills._bank import build_draft, write_draft
    from shopsimrl_core.skills._candidates import mine_candidates

    run = require_run_dir(args.train_run_dir)
    out_dir = require_output_dir(args.out_dir, "the output folder")
    provider = None
    if args.analyst_base_url:
        from shopsimrl_core.skills._analyst import AnalystCandidateProvider

        provider = AnalystCandidateProvider(base_url=args.analyst_base_url, model=args.analyst_model,
                                            api_key_env=args.analyst_api_key_env)
    result = mine_candidates(run / "labels.parquet", run / "traces.jsonl", out_dir / "skill_candidates.json",
                             provider=provider, min_support=args.min_support)
    draft, bank = build_draft(result.document, active_skill_budget=args.active_skill_budget)
    draft_path, bank_path = write_draft(draft, bank, out_dir)
    _print({"candidates": str(result.path), "accepted": len(result.accepted), "rejected": len(result.rejected),
            "draft": str(draft_path), "draft_skillbank": str(bank_path)})
    return 0


def _cmd_gate_a(args: argparse.Namespace) -> int:
    from shopsimrl_core.skills._gate_a import GateAConfig, plan_gate_a, run_gate_a

    settings = GateAConfig(output_dir=Path(args.output_dir), experiment_config=Path(args.experiment_config),
                           bare_run_dir=Path(args.bare_run_dir), draft_path=Path(args.draft_path),
                           mask_seed=args.mask_seed, active_skill_budget=args.active_skill_budget,
                           bootstrap_samples=args.bootstrap_samples, selection_rule=args.selection_rule)
    if args.plan:
        _print(plan_gate_a(settings))
        return 0
    result = run_gate_a(settings)
    _print({"status": result.status, "selected_chunk_ids": result.selected_chunk_ids,
            "selected_skillbank": str(result.selected_skillbank_path) if result.selected_skillbank_path else None})
    return 0 if result.status == "complete" else 1


def _cmd_pool(args: argparse.Namespace) -> int:
    from shopsimrl_core._hashing import read_json_file, write_json_atomic
    from shopsimrl_core.documents._skills import SkillCandidates
    from shopsimrl_core.episode._skillbank import load_skillbank
    from shopsimrl_core.skills._pool import build_candidate_pool

    require_input_file(args.active_bank, "active SkillBank", "pass a shopsimrl-skillbank-v1 JSON file")
    candidates_path = Path(args.candidates)
    fix = "pass the skill_candidates.json written by `shopsimrl candidates`"
    require_input_file(args.candidates, "skill candidates file", fix)
    require_output_file(args.out, "the pool's output")
    raw = read_json_file(candidates_path, "skill candidates", fix=fix)
    candidates = SkillCandidates.parse(raw, str(candidates_path)).to_json()
    pool = build_candidate_pool(load_skillbank(args.active_bank), candidates, round_id=args.round_id,
                                proposal_checkpoint=args.proposal_checkpoint, max_candidates=args.max_candidates)
    write_json_atomic(args.out, pool)
    _print({"path": str(args.out), "pool_sha256": pool["pool_sha256"],
            "candidates": [(c["candidate_id"], c["operation"], c["target_chunk_id"]) for c in pool["candidates"]]})
    return 0


def _cmd_online_gate(args: argparse.Namespace) -> int:
    from shopsimrl_core.skills._online_gate import OnlineGateConfig, run_online_gate

    result = run_online_gate(
        OnlineGateConfig(
            output_dir=Path(args.output_dir),
            experiment_config=Path(args.experiment_config),
            bare_run_dir=Path(args.bare_run_dir),
            candidate_pool_path=Path(args.pool),
            mask_seed=args.mask_seed,
            active_skill_budget=args.active_skill_budget,
            bootstrap_samples=args.bootstrap_samples,
            selection_rule=args.selection_rule,
        )
    )
    _print(
        {
            "status": result.status,
            "selected_intervention_ids": result.selected_chunk_ids,
            "selected_skillbank": str(result.selected_skillbank_path) if result.selected_skillbank_path else None,
        }
    )
    return 0 if result.status == "complete" else 1


def _cmd_snapshot(args: argparse.Namespace) -> int:
    from shopsimrl_core.episode._skillbank import load_skillbank
    from shopsimrl_core.skills._bank import snapshot_skillbank

    require_input_file(args.bank, "SkillBank", "pass a shopsimrl-skillbank-v1 JSON file")
    require_output_dir(args.out_dir, "the snapshot folder")
    snap = snapshot_skillbank(load_skillbank(args.bank), args.out_dir)
    _print({"path": str(snap.path), "bank_sha256": snap.bank_sha256, "skills": snap.skill_ids, "reused": snap.reused})
    return 0


def register_skills_cli(subparsers: Any) -> None:
    """Register the skills-layer verbs on the ``shopsimrl`` parser.

    ``export traces|sft`` (runtime-semantics §22.7, §22.8), ``labels``, ``candidates``, ``gate-a``,
    ``candidate-pool``, ``online-gate`` and ``snapshot``. Each sets ``handler`` (parsed args -> exit
    code), as ``cli._main`` expects.
    """
    export = subparsers.add_parser("export", help="export traces with a redaction profile, or an SFT dataset")
    verbs = export.add_subparsers(dest="export_kind", required=True, metavar="KIND")
    t = verbs.add_parser("traces", help="write a redacted copy of a run's traces (never named traces.jsonl)")
    t.add_argument("run_dir")
    t.add_argument("out")
    t.add_argument("--profile", default="public", choices=list(PROFILES))
    t.add_argument("--all-attempts", action="store_true", help="export every attempt, not only the latest")
    t.set_defaults(handler=_cmd_traces)
    s = verbs.add_parser("sft", help="write chat-format SFT records of successful episodes")
    s.add_argument("paths", nargs="+", metavar="PATH", help="run directories, then the output file")
    s.add_argument("--with-reasoning", action="store_true", help="put reasoning back as reasoning_content")
    s.add_argument("--allow-protocol-errors", action="store_true", help="keep episodes with repaired protocol errors")
    s.add_argument("--include-failures", action="store_true", help="keep completed episodes with r_success 0")
    s.set_defaults(handler=_cmd_sft)

    lab = subparsers.add_parser("labels", help="label every episode of a run; writes labels.parquet")
    lab.add_argument("run_dir")
    lab.add_argument("--out", default=None, help="output parquet (default <run_dir>/labels.parquet)")
    lab.set_defaults(handler=_cmd_labels)

    c = subparsers.add_parser("candidates", help="mine skill candidates and a draft from a labelled TRAIN run")
    c.add_argument("train_run_dir")
    c.add_argument("out_dir")
    c.add_argument("--min-support", type=positive, default=2)
    c.add_argument("--active-skill-budget", type=positive, default=10)
    c.add_argument("--analyst-base-url", default=None, help="use an analyst model at this OpenAI base URL")
    c.add_argument("--analyst-model", default="analyst")
    c.add_argument("--analyst-api-key-env", default=None)
    c.set_defaults(handler=_cmd_candidates)

    g = subparsers.add_parser("gate-a", help="paired masked validation of a draft; writes the selected SkillBank")
    g.add_argument("experiment_config", help="bare val evaluation YAML (skills.path null)")
    g.add_argument("bare_run_dir")
    g.add_argument("draft_path")
    g.add_argument("output_dir")
    g.add_argument("--mask-seed", type=int, default=20260901)
    g.add_argument("--active-skill-budget", type=positive, default=None)
    g.add_argument("--bootstrap-samples", type=positive, default=1000)
    g.add_argument("--selection-rule", choices=["published", "above_noise"], default="published",
                   help="published: β > 0, top K (§16.3); above_noise: also above the sign-flip noise bar")
    g.add_argument(
        "--plan", action="store_true", help="print the gate plan (reads and checks the bare run; no rollouts)"
    )
    g.set_defaults(handler=_cmd_gate_a)

    pl = subparsers.add_parser("candidate-pool", help="ADD/REWRITE candidate pool against an active SkillBank")
    pl.add_argument("active_bank")
    pl.add_argument("candidates", help="skill_candidates.json")
    pl.add_argument("out")
    pl.add_argument("--round-id", required=True)
    pl.add_argument("--proposal-checkpoint", required=True)
    pl.add_argument("--max-candidates", type=positive, default=6)
    pl.set_defaults(handler=_cmd_pool)

    og = subparsers.add_parser("online-gate", help="paired validation of a candidate pool; writes the next active bank")
    og.add_argument("experiment_config", help="bare val evaluation YAML with model.checkpoint_id")
    og.add_argument("bare_run_dir")
    og.add_argument("pool")
    og.add_argument("output_dir")
    og.add_argument("--mask-seed", type=int, default=20260901)
    og.add_argument("--active-skill-budget", type=positive, default=10)
    og.add_argument("--bootstrap-samples", type=positive, default=1000)
    og.add_argument("--selection-rule", choices=["published", "above_noise"], default="published",
                    help="published: rewrite winners, then β > 0, top K (§17.3); above_noise: also above the "
                    "sign-flip noise bar")
    og.set_defaults(handler=_cmd_online_gate)

    sn = subparsers.add_parser("snapshot", help="write an immutable skillbank-<sha256>.json of a SkillBank")
    sn.add_argument("bank")
    sn.add_argument("out_dir")
    sn.set_defaults(handler=_cmd_snapshot)

"""Trace2Skill cold start end to end, resumable per stage (runtime-semantics §18).

Stages, in the spec's order: load and validate train traces → success cards and live failure audits
(``trajectory_analyses.jsonl``, ``evidence_cards.jsonl``, ``analysis_errors.jsonl``,
``analysis_summary.json``) → consolidation per channel batch (``cluster_batches.jsonl``) →
compiler (``compiler_output.json``, ``compiler_invalid_attempts.jsonl``) → the draft
(``initial_skill_draft.json``/``.md``, ``initial_skillbank.json``, ``proposal_ledger.jsonl``,
``trace2skill_candidates.json``) and ``trace2skill_manifest.json``.

Resume: every unit of work (an episode's analysis, a batch, the compile) is stored with an
``input_fingerprint`` over its input, the prompts' hash and the model's identity. A rerun reuses
every stored unit whose fingerprint still matches and calls the model only for the rest, so an
interrupted run continues where it stopped and a rerun with the same inputs makes no model call.
Failed units are logged to ``analysis_errors.jsonl`` and retried by the next run.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shopsimrl_core._errors import ShopSimRLError, SkillError
from shopsimrl_core._hashing import fingerprint, json_object, sha256_file, write_json_atomic, write_text_atomic
from shopsimrl_core._versions import SKILL_CANDIDATES_SCHEMA, TRACE_SCHEMA
from shopsimrl_core.episode._trace import is_complete
from shopsimrl_core.skills import build_skillbank
from shopsimrl_core.skills.trace2skill._cards import failure_card, success_cards
from shopsimrl_core.skills.trace2skill._consolidate import (
    MAX_CHUNKS,
    batches,
    card_view,
    compile_skill,
    consolidate_batch,
    number_chunks,
)
from shopsimrl_core.skills.trace2skill._prompts import (
    INITIAL_DRAFT_SCHEMA,
    PROMPT_VERSION,
    PROMPTS_SHA256,
    TRACE2SKILL_SCHEMA,
)
from shopsimrl_core.skills.trace2skill._structured import AnalystModel, StructuredOutputError

__all__ = ["Trace2SkillConfig", "Trace2SkillResult", "run_trace2skill", "load_train_traces", "write_candidates"]


def _now() -> str:
    return datetime.now(UTC).isoformat()


@dataclass
class Trace2SkillConfig:
    """Trace2Skill settings (the blocks of runtime-semantics §18.1).

    ``expected_trajectories`` None accepts any count (the spec's 400 is for the published run);
    ``compiler`` None reuses ``analyst``.
    """

    traces: Path
    output_dir: Path
    analyst: AnalystModel
    environment_url: str = "http://127.0.0.1:5700"
    environment_timeout: float = 30.0
    persona: bool = True
    compiler: AnalystModel | None = None
    expected_trajectories: int | None = None
    seed: int = 20260831
    concurrency: int = 4
    resume: bool = True
    max_failure_steps: int = 12
    max_cards_per_trajectory: int = 2
    batch_size: int = 40
    validation_dimension_cap: int = 16
    active_skill_budget: int = 10
    environment_transport: Any = None

    def problems(self) -> list[str]:
        """Every setting outside its range, one line each (empty = valid)."""
        out = []
        if not 1 <= self.validation_dimension_cap <= MAX_CHUNKS:
            out.append(f"compilation.validation_dimension_cap must be 1..{MAX_CHUNKS}, "
                       f"got {self.validation_dimension_cap}")
        if not 1 <= self.active_skill_budget <= self.validation_dimension_cap:
            out.append("compilation.active_skill_budget must be 1..validation_dimension_cap, "
                       f"got {self.active_skill_budget}")
        for key in ("batch_size", "concurrency", "max_failure_steps"):
            if getattr(self, key) < 1:
                out.append(f"{key} must be >= 1, got {getattr(self, key)}")
        if self.max_cards_per_trajectory < 0:
            out.append("analysis.max_cards_per_trajectory must be >= 0")
        if not isinstance(self.persona, bool):
            out.append("environment.persona must be a bool")
        return out


@dataclass
class Trace2SkillResult:
    """Where the outputs are and what they hold."""

    output_dir: Path
    manifest: dict[str, Any]
    draft_path: Path | None = None
    skillbank_path: Path | None = None
    candidates_path: Path | None = None
    model_calls: int = 0
    chunk_ids: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- loading


def load_train_traces(path: str | Path, expected: int | None = None, *,
                      only: Collection[str] | None = None) -> list[dict[str, Any]]:
    """The latest record per ``episode_id`` of a TRAIN traces file, validated as §18.2 step 1 says.

    *only* keeps just those episodes (e.g. a training round's "full-skill failure pending analysis" episodes,
    ``pending_analysis_episode_ids`` of its triage documents); each of them must be in the file.

    Raises:
        SkillError (``trace2skill-input``): a line that does not parse, a record that is not a
            completed v4 train trace with binary ``r_success``, a count other than *expected*, or an
            episode of *only* that the file does not hold.
    """
    source = Path(path)
    if not source.is_file():
        raise SkillError(f"{source}: traces file not found; run the train evaluation first", code="trace2skill-input")
    latest: dict[str, dict[str, Any]] = {}
    with open(source, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise SkillError(f"{source}:{number}: line is not JSON ({exc}); repair or remove it",
                                 code="trace2skill-input") from exc
            eid = record.get("episode_id") if isinstance(record, dict) else None
            if not isinstance(eid, str) or not eid:
                raise SkillError(f"{source}:{number}: record has no string episode_id", code="trace2skill-input")
            latest[eid] = record
    if only is not None:
        wanted = set(only)
        missing = sorted(wanted - set(latest))
        if missing:
            raise SkillError(f"{source}: holds no episode {missing[0]} ({len(missing)} of the requested episodes "
                             "missing); pass the traces of the round the triage documents come from",
                             code="trace2skill-input")
        latest = {k: v for k, v in latest.items() if k in wanted}
    records = [latest[k] for k in sorted(latest)]
    for record in records:
        eid = record["episode_id"]
        if record.get("schema_version") != TRACE_SCHEMA:
            raise SkillError(f"{source}: {eid} is not {TRACE_SCHEMA}", code="trace2skill-input")
        if json_object(record.get("job")).get("split") != "train":
            raise SkillError(f"{source}: {eid} is not a train trace; Trace2Skill reads train traces only "
                             "(val is for gates, test for final numbers)", code="evidence-not-train")
        if "redaction" in record:
            raise SkillError(f"{source}: holds exported (redacted) traces; use the raw run directory",
                             code="redacted-evidence")
        if not is_complete(record):
            raise SkillError(f"{source}: {eid} is not completed; finish or retry the run first",
                             code="trace2skill-input")
        if json_object(json_object(record["final"]).get("reward_detail")).get("r_success") not in (0, 1):
            raise SkillError(f"{source}: {eid} has no binary final.reward_detail.r_success", code="trace2skill-input")
    if expected is not None and len(records) != expected:
        raise SkillError(f"{source}: {len(records)} unique traces, expected_trajectories is {expected}; "
                         "set experiment.expected_trajectories to the run's size", code="trace2skill-input")
    return records


def _is_success(record: dict[str, Any]) -> bool:
    return json_object(record["final"].get("reward_detail")).get("r_success") == 1


# --------------------------------------------------------------------------- ledgers


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a torn last line of an interrupted run: that unit is redone
            if isinstance(row, dict):
                rows.append(row)
    return rows


def _append(path: Path, row: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n")


def _write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    return write_text_atomic(path, [json.dumps(r, ensure_ascii=False, allow_nan=False) + "\n" for r in rows])


def _cache(path: Path, resume: bool) -> dict[str, dict[str, Any]]:
    if not resume:
        return {}
    return {r["input_fingerprint"]: r for r in _read_jsonl(path) if r.get("status") == "ok"}


# --------------------------------------------------------------------------- analysis stage


async def _analyse(cfg: Trace2SkillConfig, out: Path, records: Sequence[dict[str, Any]], *, stage: str,
                   active_chunk_ids: Sequence[str],
                   channels: Sequence[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from shopsimrl_core.adapters import ShopSimulatorClient

    ledger = out / "trajectory_analyses.jsonl"
    cached = _cache(ledger, cfg.resume)
    model = cfg.analyst
    semaphore = asyncio.Semaphore(cfg.concurrency)
    errors: list[dict[str, Any]] = []
    results: dict[str, list[dict[str, Any]]] = {}

    def key(record: dict[str, Any], channel: str) -> str:
        settings = ({"max_cards": cfg.max_cards_per_trajectory} if channel == "success" else
                    {"max_failure_steps": cfg.max_failure_steps, "stage": stage,
                     "active_chunk_ids": list(active_chunk_ids), "persona": cfg.persona})
        return fingerprint({"channel": channel, "prompts_sha256": PROMPTS_SHA256, "model": model.identity,
                            "trace_sha256": fingerprint(record), "settings": settings})

    async with ShopSimulatorClient(base_url=cfg.environment_url, timeout=cfg.environment_timeout,
                                   persona=cfg.persona, max_connections=max(2, cfg.concurrency),
                                   transport=cfg.environment_transport, http_transport="httpx") as env:

        async def one(record: dict[str, Any]) -> None:
            channel = "success" if _is_success(record) else "failure"
            if channel not in channels:
                return
            fp = key(record, channel)
            if fp in cached:
                results[record["episode_id"]] = cached[fp]["cards"]
                return
            async with semaphore:
                try:
                    if channel == "success":
                        cards, row = await success_cards(model, record, max_cards=cfg.max_cards_per_trajectory)
                    else:
                        card, row = await failure_card(model, env, record, max_failure_steps=cfg.max_failure_steps,
                                                       stage=stage, active_chunk_ids=active_chunk_ids)
                        cards = [card]
                except (ShopSimRLError, StructuredOutputError) as exc:
                    error = {"episode_id": record["episode_id"], "channel": channel, "input_fingerprint": fp,
                             "code": getattr(exc, "code", None), "type": type(exc).__name__,
                             "message": exc.one_line(), "created_at": _now(),
                             "invalid_attempts": getattr(exc, "invalid_attempts", [])}
                    errors.append(error)
                    _append(out / "analysis_errors.jsonl", error)
                    return
            _append(ledger, {**row, "status": "ok", "input_fingerprint": fp, "cards": cards, "created_at": _now()})
            results[record["episode_id"]] = cards

        async with model:
            await asyncio.gather(*(one(r) for r in records))
    cards = [c for eid in sorted(results) for c in results[eid]]
    return cards, errors


# --------------------------------------------------------------------------- consolidation and compiler


async def _consolidate(cfg: Trace2SkillConfig, out: Path, cards: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    ledger = out / "cluster_batches.jsonl"
    cached = _cache(ledger, cfg.resume)
    clusters: list[dict[str, Any]] = []
    model = cfg.analyst
    async with model:
        for channel, number, batch in batches(cards, cfg.batch_size):
            fp = fingerprint({"stage": "consolidation", "prompts_sha256": PROMPTS_SHA256, "model": model.identity,
                              "channel": channel, "batch": number, "cards": [card_view(c) for c in batch]})
            if fp in cached:
                clusters += cached[fp]["clusters"]
                continue
            made, result = await consolidate_batch(model, channel, number, batch)
            _append(ledger, {"status": "ok", "input_fingerprint": fp, "channel": channel, "batch": number,
                             "card_ids": [c["card_id"] for c in batch], "clusters": made,
                             "evidence_only_card_ids": result.arguments["evidence_only_card_ids"],
                             "attempts": result.attempts, "invalid_attempts": result.invalid_attempts,
                             "created_at": _now()})
            clusters += made
    return clusters


async def _compile(cfg: Trace2SkillConfig, out: Path, clusters: Sequence[dict[str, Any]]) -> dict[str, Any]:
    model = cfg.compiler or cfg.analyst
    path = out / "compiler_output.json"
    fp = fingerprint({"stage": "compiler", "prompts_sha256": PROMPTS_SHA256, "model": model.identity,
                      "cap": cfg.validation_dimension_cap, "clusters": list(clusters)})
    if cfg.resume and path.is_file():
        stored: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        if stored.get("input_fingerprint") == fp:
            return stored
    try:
        async with model:
            result = await compile_skill(model, clusters, cap=cfg.validation_dimension_cap)
    except StructuredOutputError as exc:
        for attempt in exc.invalid_attempts:
            _append(out / "compiler_invalid_attempts.jsonl", {**attempt, "input_fingerprint": fp})
        raise
    for attempt in result.invalid_attempts:
        _append(out / "compiler_invalid_attempts.jsonl", {**attempt, "input_fingerprint": fp})
    stored = {"input_fingerprint": fp, "attempts": result.attempts, "arguments": result.arguments,
              "created_at": _now()}
    write_json_atomic(path, stored)
    return stored


# --------------------------------------------------------------------------- the run


def _identity(cfg: Trace2SkillConfig) -> dict[str, Any]:
    return {"prompt_version": PROMPT_VERSION, "prompts_sha256": PROMPTS_SHA256, "analyst_model": cfg.analyst.identity,
            "compiler_model": (cfg.compiler or cfg.analyst).identity}


def _sources(chunk: dict[str, Any], clusters: dict[str, dict[str, Any]],
             cards: dict[str, dict[str, Any]]) -> tuple[list[str], list[str]]:
    card_ids = [cid for k in chunk["evidence_cluster_ids"] for cid in clusters[k]["evidence_card_ids"]]
    episodes = sorted({cards[c]["episode_id"] for c in card_ids if c in cards})
    return card_ids, episodes


def run_trace2skill(cfg: Trace2SkillConfig) -> Trace2SkillResult:
    """Run (or resume) Trace2Skill on a train traces file and write every §18.5 output.

    Raises:
        SkillError: invalid settings (``trace2skill-config``), bad input traces, no eligible card,
            or a compiler that stayed invalid after 5 attempts (``structured-output-invalid``).
        InferenceError / ShopSimulatorError: an endpoint failed past its retries.
    """
    problems = cfg.problems()
    if problems:
        raise SkillError("trace2skill: " + "; ".join(problems), code="trace2skill-config")
    out = Path(cfg.output_dir)
    records = load_train_traces(cfg.traces, cfg.expected_trajectories)
    calls_before = cfg.analyst.calls + (cfg.compiler.calls if cfg.compiler else 0)
    cards, errors = asyncio.run(_analyse(cfg, out, records, stage="cold_start", active_chunk_ids=(),
                                         channels=("success", "failure")))
    _write_jsonl(out / "evidence_cards.jsonl", cards)
    successes = sum(1 for r in records if _is_success(r))
    analysed = sorted({c["episode_id"] for c in cards})
    summary = {"input": {"failure": len(records) - successes, "success": successes, "total": len(records)},
               "unique_analyzed": len(analysed), "evidence_cards": len(cards),
               "missing": sorted({r["episode_id"] for r in records} - set(analysed)), "error_count": len(errors),
               "cards_path": str(out / "evidence_cards.jsonl")}
    write_json_atomic(out / "analysis_summary.json", summary)
    if errors:
        raise SkillError(f"trace2skill: {len(errors)} episode analyses failed (see {out / 'analysis_errors.jsonl'}); "
                         "rerun to retry them (finished analyses are reused)", code="trace2skill-analysis-errors")
    clusters = asyncio.run(_consolidate(cfg, out, cards))
    if not clusters:
        raise SkillError("trace2skill: no eligible evidence card produced a cluster; nothing to compile "
                         "(more successes, or failures with a successful counterfactual, are needed)",
                         code="no-candidates")
    compiled = asyncio.run(_compile(cfg, out, clusters))
    args = compiled["arguments"]
    chunks = number_chunks(args["chunks"])
    by_cluster = {c["cluster_id"]: c for c in clusters}
    by_card = {c["card_id"]: c for c in cards}
    for chunk in chunks:
        chunk["source_card_ids"], chunk["source_episode_ids"] = _sources(chunk, by_cluster, by_card)
    draft = {"schema_version": INITIAL_DRAFT_SCHEMA, "stage": "cold_start_draft_pre_validation",
             "gate_status": {"gate_a": "not_run", "gate_b": "not_run"},
             "validation_dimension_cap": cfg.validation_dimension_cap,
             "active_skill_budget": min(cfg.active_skill_budget, len(chunks)),
             "skill_title": args["skill_title"].strip(),
             "chunks": chunks, "evidence_only_cluster_ids": list(args["evidence_only_cluster_ids"]),
             "conflicts_resolved": list(args["conflicts_resolved"]), "trace2skill": _identity(cfg)}
    draft_path = write_json_atomic(out / "initial_skill_draft.json", draft)
    md = [f"# {draft['skill_title']}", "", "> Cold-start draft; not active until Gate A and Gate B pass.", "",
          "\n\n".join(c["content"] for c in chunks)]
    write_text_atomic(out / "initial_skill_draft.md", "\n".join(md) + "\n")
    bank = build_skillbank([{"skill_id": c["chunk_id"], "version": "draft-1", "enabled": True, "content": c["content"],
                             "metadata": {"workflow_stage": c["workflow_stage"], "draft_only": True,
                                          "evidence_cluster_ids": c["evidence_cluster_ids"],
                                          "validation_result": None}} for c in chunks],
                           bank_version="cold-start-draft-pre-validation",
                           metadata={"skill_title": draft["skill_title"], "draft_sha256": fingerprint(draft)})
    bank_path = write_json_atomic(out / "initial_skillbank.json", bank)
    _write_jsonl(out / "proposal_ledger.jsonl", [
        {"candidate_id": c["chunk_id"], "operation": "ADD", "target_chunk_id": None,
         "source_card_ids": c["source_card_ids"], "failure_mechanism": None, "proposal_checkpoint": None,
         "stage": "cold_start", "consolidation_cluster_id": c["evidence_cluster_ids"][0] if c["evidence_cluster_ids"]
         else None, "replacement_family_id": None, "content": c["content"], "validation_result": None,
         "validation_history": []} for c in chunks])
    candidates_path = write_candidates(out / "trace2skill_candidates.json", chunks, _identity(cfg),
                                       {"traces_path": str(cfg.traces), "traces_sha256": sha256_file(cfg.traces)})
    calls = cfg.analyst.calls + (cfg.compiler.calls if cfg.compiler else 0) - calls_before
    files = ["evidence_cards.jsonl", "analysis_summary.json", "initial_skill_draft.json", "initial_skillbank.json",
             "proposal_ledger.jsonl", "trace2skill_candidates.json"]
    manifest = {"schema_version": TRACE2SKILL_SCHEMA, "created_at": _now(), "status": "drafted",
                "config": {"traces": str(cfg.traces), "output_dir": str(out), "environment_url": cfg.environment_url,
                           "persona": cfg.persona, "seed": cfg.seed, "concurrency": cfg.concurrency,
                           "max_failure_steps": cfg.max_failure_steps,
                           "max_cards_per_trajectory": cfg.max_cards_per_trajectory, "batch_size": cfg.batch_size,
                           "validation_dimension_cap": cfg.validation_dimension_cap,
                           "active_skill_budget": cfg.active_skill_budget},
                "identity": _identity(cfg),
                "input": {"traces_sha256": sha256_file(cfg.traces), "trajectories": len(records)},
                "counts": {"evidence_cards": len(cards), "eligible_cards": sum(1 for c in cards
                                                                               if c.get("eligible_for_consolidation")),
                           "clusters": len(clusters), "chunks": len(chunks), "model_calls_this_run": calls},
                "draft_sha256": fingerprint(draft), "bank_sha256": fingerprint(bank),
                "files": {name: sha256_file(out / name) for name in files}}
    write_json_atomic(out / "trace2skill_manifest.json", manifest)
    return Trace2SkillResult(out, manifest, draft_path, bank_path, candidates_path, calls,
                             [c["chunk_id"] for c in chunks])


def write_candidates(path: Path, chunks: Sequence[dict[str, Any]], provider: dict[str, Any],
                     source: dict[str, Any], *, labels: Sequence[str | None] | None = None) -> Path:
    """Write chunks as a ``shopsimrl-skill-candidates-v1`` document, every chunk ``accepted``.

    That is the document ``build_draft`` and ``build_candidate_pool`` read; evidence ids are kept.
    """
    candidates: list[dict[str, Any]] = []
    for i, c in enumerate(chunks):
        label = labels[i] if labels is not None else None
        candidates.append({"candidate_id": c["chunk_id"], "status": "accepted", "reason": None,
                           "source_label": label or "trace2skill:" + c["chunk_id"], "provider": "trace2skill",
                           "evidence_cluster_ids": list(c.get("evidence_cluster_ids", [])),
                           "evidence": [{"episode_id": e, "step_index": None, "role": "trace2skill",
                                         "label": None} for e in c.get("source_episode_ids", [])],
                           "firewall_findings": [], **{k: c[k] for k in ("title", "workflow_stage", "applicable_when",
                                                                         "procedure", "verification", "common_failure")
                                                     if k in c},
                           "content": c["content"], "content_sha256": fingerprint(c["content"])})
    core = {"schema_version": SKILL_CANDIDATES_SCHEMA, "provider": {"provider": "trace2skill", **provider},
            "source": dict(source), "accepted_count": len(candidates), "rejected_count": 0, "candidates": candidates}
    return write_json_atomic(path, {**core, "created_at": _now(),
                                    "candidates_sha256": fingerprint({k: v for k, v in core.items() if k != "source"})})

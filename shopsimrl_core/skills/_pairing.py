"""Reading and pairing validation traces: strict reader, outcomes, bare preflight, observation rows.

The contract is runtime-semantics §14.2–§14.5.

Everything here reads files the gates did not write (the bare run) or writes nothing; the gates
(``_gate_a``, ``_online_gate``) call it through ``_gate``. ``_load_json`` is the read boundary of
every gate input: a JSON object, then (with a model) the document's format.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shopsimrl_core._errors import SkillError
from shopsimrl_core._hashing import fingerprint, json_object
from shopsimrl_core.documents._base import Document, DocumentError
from shopsimrl_core.documents._runs import RunManifest
from shopsimrl_core.episode._trace import is_complete
from shopsimrl_core.runs.planning._jobs import episode_id

__all__ = [
    "BareBaseline",
    "read_validation_traces",
    "trace_outcomes",
    "preflight_bare_run",
    "pair_observations",
]


def _gate_error(message: str, code: str = "gate-error", **context: Any) -> SkillError:
    return SkillError(message, code=code, **context)



def _load_json(path: Path, what: str, model: type[Document] | None = None) -> dict[str, Any]:
    # The read boundary of every gate input: JSON object, then (with *model*) the document's format.
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise _gate_error(f"{path}: cannot read {what} ({exc})", code="gate-input") from exc
    if not isinstance(value, dict):
        raise _gate_error(f"{path}: {what} must be a JSON object", code="gate-input")
    if model is not None:
        try:
            value = model.parse(value, str(path)).to_json()
        except DocumentError as exc:
            raise _gate_error(str(exc), code="gate-input") from None
    document: dict[str, Any] = value
    return document


# --------------------------------------------------------------------------- validation traces


def read_validation_traces(path: str | Path) -> dict[str, dict[str, Any]]:
    """Read a traces file under the strict rules of runtime-semantics §14.3; return the completed record per episode.

    Raises:
        SkillError: an unparsable line, a record without ``episode_id``, a second completed record
            (``duplicate completed validation trace``) or any record after a completed one
            (``validation attempt follows a completed trace``).
    """
    completed: dict[str, dict[str, Any]] = {}
    seen_failed: set[str] = set()
    p = Path(path)
    if not p.is_file():
        raise _gate_error(f"{p}: validation traces not found", code="gate-missing-traces")
    with open(p, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise _gate_error(f"{p}:{number}: validation trace line does not parse ({exc})") from exc
            if not isinstance(record, dict):
                raise _gate_error(f"{p}:{number}: validation trace line is not an object")
            eid = record.get("episode_id")
            if not isinstance(eid, str) or not eid:
                raise _gate_error(f"{p}:{number}: validation trace has no episode_id")
            if "redaction" in record:
                raise _gate_error(
                    f"{p}:{number}: exported (redacted) traces are not validation input; use the raw run directory"
                )
            if eid in completed:
                if is_complete(record):
                    raise _gate_error(f"{p}:{number}: duplicate completed validation trace for {eid}")
                raise _gate_error(f"{p}:{number}: validation attempt follows a completed trace for {eid}")
            if is_complete(record):
                completed[eid] = record
            else:
                seen_failed.add(eid)
    return completed


def trace_outcomes(record: dict[str, Any]) -> dict[str, float]:
    """``{"reward": final.reward, r_*: …}`` of a complete trace (runtime-semantics §14.4).

    Raises:
        SkillError: incomplete trace, missing ``r_strict``/``r_success``, a non-finite or boolean
            value, or ``|reward − r_strict| > 1e-12``.
    """
    eid = record.get("episode_id")
    if not is_complete(record):
        raise _gate_error(f"{eid}: validation trace is not complete")
    final = record["final"]
    detail = json_object(final.get("reward_detail"))
    if "r_strict" not in detail or "r_success" not in detail:
        raise _gate_error(f"{eid}: reward_detail lacks r_strict or r_success")
    out = {"reward": final.get("reward")}
    out.update({k: v for k, v in detail.items() if k.startswith("r_")})
    for key, value in out.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise _gate_error(f"{eid}: outcome {key} must be a finite number (got {value!r})")
    if abs(out["reward"] - out["r_strict"]) > 1e-12:
        raise _gate_error(f"{eid}: reward {out['reward']} differs from r_strict {out['r_strict']}")
    return {k: float(v) for k, v in out.items()}


def _without(d: Any, *keys: str) -> Any:
    return {k: v for k, v in d.items() if k not in keys} if isinstance(d, dict) else d


def _job_key(job: dict[str, Any], with_seed: bool) -> tuple[Any, ...]:
    base = (job.get("split"), job.get("task_id"), job.get("sample_id"))
    return base + (job.get("seed"),) if with_seed else base


@dataclass
class BareBaseline:
    """A checked bare run: its traces by episode id and the digest of runtime-semantics §14.5."""

    run_dir: Path
    traces: dict[str, dict[str, Any]]
    digest: dict[str, Any]


def preflight_bare_run(bare_run_dir: str | Path, gate_plan: dict[str, Any], *, send_seed: bool) -> BareBaseline:
    """Run the preflight checks of runtime-semantics §14.2 against a bare validation run, in order.

    Raises:
        SkillError (``gate-preflight``): the first failed check, with the spec's message
            (e.g. ``bare validation manifest fingerprint mismatch``).
    """
    run = Path(bare_run_dir)
    manifest_path = run / "manifest.json"
    if not manifest_path.is_file():
        raise _gate_error(
            f"{manifest_path}: bare validation manifest not found; run the bare val suite first", code="gate-preflight"
        )
    manifest = _load_json(manifest_path, "bare validation manifest", RunManifest)
    plan = manifest.get("plan") or {}
    if manifest.get("plan_fingerprint") != fingerprint(plan):
        raise _gate_error("bare validation manifest fingerprint mismatch", code="gate-preflight")
    if plan.get("skills") != {"provider": "none"}:
        raise _gate_error(
            f"bare validation run has skills {plan.get('skills')}; it must be skill-free", code="gate-preflight"
        )
    compared: dict[str, Callable[[dict[str, Any]], Any]] = {
        "model": lambda p: _without(p.get("model"), "transport"),
        "prompt": lambda p: p.get("prompt"),
        "runtime": lambda p: _without(p.get("runtime"), "concurrency"),
        "environment": lambda p: p.get("environment"),
        "task_split": lambda p: _without(p.get("task_split"), "source_path"),
    }
    for name, view in compared.items():
        if view(plan) != view(gate_plan):
            raise _gate_error(f"bare validation plan differs from the gate plan on {name}", code="gate-preflight")
    bare_keys = [_job_key(j, send_seed) for j in plan.get("jobs") or []]
    gate_keys = [_job_key(j, send_seed) for j in gate_plan.get("jobs") or []]
    label = "split/task/sample/seed" if send_seed else "split/task/sample"
    if len(set(bare_keys)) != len(bare_keys) or set(bare_keys) != set(gate_keys):
        raise _gate_error(f"bare validation job coverage mismatch ({label})", code="gate-preflight")
    traces = read_validation_traces(run / "traces.jsonl")
    trace_keys = {_job_key(r.get("job") or {}, send_seed) for r in traces.values()}
    if trace_keys != set(bare_keys) or len(traces) != len(bare_keys):
        raise _gate_error(
            f"bare validation traces do not cover the planned jobs ({label}): "
            f"{len(traces)} complete traces for {len(bare_keys)} jobs",
            code="gate-preflight",
        )
    env_signatures = set()
    outcome_keys = set()
    for eid, record in sorted(traces.items()):
        job = record.get("job") or {}
        task_id, sample_id = job.get("task_id"), job.get("sample_id")
        if not isinstance(task_id, int) or not isinstance(sample_id, int) or eid != episode_id(task_id, sample_id):
            raise _gate_error(f"{eid}: episode_id does not match its job", code="gate-preflight")
        prov = record.get("provenance") or {}
        if record.get("selected_skills") != [] or prov.get("skills") != {"provider": "none"}:
            raise _gate_error(f"{eid}: bare validation trace carries skills", code="gate-preflight")
        for key in ("model", "environment", "prompt", "runtime", "skills"):
            if not isinstance(prov.get(key), dict) or not prov[key]:
                raise _gate_error(f"{eid}: bare validation trace lacks provenance.{key}", code="gate-preflight")
        if _without(prov["model"], "transport") != _without(plan.get("model"), "transport"):
            raise _gate_error(f"{eid}: bare trace model provenance differs from the bare plan", code="gate-preflight")
        if prov["prompt"] != plan.get("prompt") or _without(prov["runtime"], "concurrency") != _without(
            plan.get("runtime"), "concurrency"
        ):
            raise _gate_error(
                f"{eid}: bare trace prompt/runtime provenance differs from the bare plan", code="gate-preflight"
            )
        plan_env = plan.get("environment") or {}
        if {k: prov["environment"].get(k) for k in plan_env} != plan_env:
            raise _gate_error(
                f"{eid}: bare trace environment provenance differs from the bare plan", code="gate-preflight"
            )
        outcome_keys.add(tuple(sorted(trace_outcomes(record))))
        env_signatures.add(json.dumps(prov["environment"], sort_keys=True))
    if len(outcome_keys) > 1:
        raise _gate_error("bare validation traces have different outcome key sets", code="gate-preflight")
    if len(env_signatures) > 1:
        raise _gate_error("bare validation mixes environment versions", code="gate-preflight")
    ordered = [traces[e] for e in sorted(traces)]
    outcomes = [trace_outcomes(r) for r in ordered]
    means = {k: sum(o[k] for o in outcomes) / len(outcomes) for k in sorted(outcomes[0])} if outcomes else {}
    digest = {
        "run_dir": str(run.resolve()),
        "plan_fingerprint": manifest.get("plan_fingerprint"),
        "observations_sha256": fingerprint(
            [
                {
                    "episode_id": r["episode_id"],
                    "job": r["job"],
                    "provenance": r["provenance"],
                    "selected_skills": r["selected_skills"],
                    "final": r["final"],
                }
                for r in ordered
            ]
        ),
        "observations": len(ordered),
        "checkpoint_id": (plan.get("model") or {}).get("checkpoint_id"),
        "mean_outcomes": means,
    }
    return BareBaseline(run_dir=run, traces=traces, digest=digest)


def pair_observations(
    assignments: dict[str, Any], treated: dict[str, dict[str, Any]], bare: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """Observation rows of runtime-semantics §14.4, in assignment order.

    Raises:
        SkillError (``gate-pairing``): key sets differ, a provenance or chunk-list mismatch,
            a non-val job, or different outcome keys.
    """
    ids = [a["episode_id"] for a in assignments["assignments"]]
    if len(set(ids)) != len(ids) or set(ids) != set(treated) or set(ids) != set(bare):
        raise _gate_error(
            f"paired episodes differ: {len(ids)} assigned, {len(treated)} treated, {len(bare)} bare complete traces",
            code="gate-pairing",
        )
    rows = []
    signature = None
    for a in assignments["assignments"]:
        eid = a["episode_id"]
        t, b = treated[eid], bare[eid]
        tp, bp = t.get("provenance") or {}, b.get("provenance") or {}
        if bp.get("skills") != {"provider": "none"} or b.get("selected_skills"):
            raise _gate_error(f"{eid}: the bare trace is not bare", code="gate-pairing")
        sig_t = (_without(tp.get("model"), "transport"), tp.get("environment"), tp.get("prompt"), tp.get("runtime"))
        sig_b = (_without(bp.get("model"), "transport"), bp.get("environment"), bp.get("prompt"), bp.get("runtime"))
        if sig_t != sig_b:
            raise _gate_error(
                f"{eid}: treated and bare provenance differ (model/environment/prompt/runtime)", code="gate-pairing"
            )
        if signature is None:
            signature = sig_t
        elif sig_t != signature:
            raise _gate_error(f"{eid}: provenance differs from the other pairs", code="gate-pairing")
        for rec in (t, b):
            job = rec.get("job") or {}
            if job.get("split") != "val" or (job.get("task_id"), job.get("sample_id")) != (
                a["task_id"],
                a["sample_id"],
            ):
                raise _gate_error(f"{eid}: job does not match the val assignment", code="gate-pairing")
        got = [s.get("skill_id") for s in t.get("selected_skills") or []]
        if got != a["included_chunk_ids"]:
            raise _gate_error(
                f"{eid}: injected chunks {got} differ from the assignment {a['included_chunk_ids']}",
                code="gate-pairing",
            )
        to, bo = trace_outcomes(t), trace_outcomes(b)
        if set(to) != set(bo):
            raise _gate_error(f"{eid}: outcome keys differ between treated and bare", code="gate-pairing")
        rd = {k: v for k, v in sorted(to.items()) if k != "reward"}
        brd = {k: v for k, v in sorted(bo.items()) if k != "reward"}
        rows.append(
            {
                "episode_id": eid,
                "split": "val",
                "task_id": a["task_id"],
                "sample_id": a["sample_id"],
                "mask": list(a["mask"]),
                "included_chunk_ids": list(a["included_chunk_ids"]),
                "reward": to["reward"],
                "bare_reward": bo["reward"],
                "delta_reward": to["reward"] - bo["reward"],
                "reward_detail": rd,
                "bare_reward_detail": brd,
                "delta_reward_detail": {k: rd[k] - brd[k] for k in rd},
            }
        )
    return rows

"""Offline LLM judge over frozen traces: a rubric, raw outputs, parsed verdicts, agreement with the reward.

The judge reads a finished run's ``traces.jsonl`` (latest complete record per episode) and asks a
model, once per episode, whether the purchase satisfies the task, through one tool call
(``submit_verdict``) with the bounded repair loop of the analysts. It NEVER runs inside a rollout:
its verdicts do not change any reward, they are compared with it.

Outputs in ``out_dir``:

- ``judgements.jsonl``: per episode ``{episode_id, input_fingerprint, rubric, model, raw_output,
  invalid_attempts, verdict {satisfied, score, rationale}, environment {reward, r_success}}``;
- ``judge_summary.json`` (``shopsimrl-offline-judge-v1``): rubric id and version, model identity,
  counts and agreement with the environment: accuracy of ``satisfied`` against ``r_success == 1``,
  the confusion table, Cohen's kappa, and the mean absolute difference of ``score`` and ``reward``.

The judge sees the public task (instruction, persona without identifying fields) and the purchase
the agent made, never the gold goal. Resumable: an episode whose input fingerprint (trace, rubric,
model) is already judged is not asked again.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shopsimrl_core._errors import ShopSimRLError
from shopsimrl_core._hashing import fingerprint, json_object, write_json_atomic

__all__ = ["JUDGE_SCHEMA", "RUBRIC", "judge_run", "agreement"]

JUDGE_SCHEMA = "shopsimrl-offline-judge-v1"
RUBRIC: dict[str, Any] = {
    "rubric_id": "shopsimrl-purchase-satisfies-task",
    "version": "v1",
    "system": ("You judge one finished episode of a shopping agent. Given the task and the product it bought, "
               "decide whether the purchase satisfies every requirement of the task (category, attributes, "
               "options, budget). Reply only by calling submit_verdict: satisfied (bool), score in [0, 1] and a "
               "one-sentence rationale."),
    "tool": {"type": "function", "function": {"name": "submit_verdict", "description": "Submit the verdict.",
                                              "parameters": {"type": "object", "properties": {
                                                  "satisfied": {"type": "boolean"},
                                                  "score": {"type": "number", "minimum": 0, "maximum": 1},
                                                  "rationale": {"type": "string", "minLength": 1}},
                                                  "required": ["satisfied", "score", "rationale"],
                                                  "additionalProperties": False}}},
}
_RUBRIC_SHA256 = fingerprint(RUBRIC)


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _validate(name: str, args: dict[str, Any]) -> str | None:
    if set(args) != {"satisfied", "score", "rationale"}:
        return "arguments must be exactly satisfied, score and rationale"
    if not isinstance(args["satisfied"], bool):
        return "satisfied must be a boolean"
    score = args["score"]
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0 <= score <= 1:
        return "score must be a number in [0, 1]"
    if not isinstance(args["rationale"], str) or not args["rationale"].strip():
        return "rationale must be a non-blank string"
    return None


def _payload(record: dict[str, Any]) -> dict[str, Any]:
    from shopsimrl_core.skills.trace2skill._compact import compact_trace

    episode = compact_trace(record)
    final = json_object(record.get("final"))
    purchase = {k: v for k, v in json_object(final.get("purchase")).items() if "asin" not in k}
    return {"task_instruction": episode["task_instruction"], "persona": episode["persona"], "purchase": purchase,
            "termination_reason": final.get("termination_reason"), "steps": len(record.get("steps") or [])}


def agreement(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Agreement of verdicts with the environment: accuracy, confusion, Cohen's kappa, mean |score − reward|.

    κ is None (JSON null) where it is undefined: no episodes, or chance agreement 1 (judge and
    environment each always give the same answer). scikit-learn's ``cohen_kappa_score`` returns NaN
    there; NaN is not valid JSON and would compare unequal to itself in tests, so null says "undefined"
    in the document. Everywhere else the two agree (issue 23: 2,000 random inputs).
    """
    pairs = [(r["verdict"]["satisfied"], r["environment"]["r_success"] == 1) for r in rows]
    n = len(pairs)
    table = {"judge_yes_env_yes": sum(1 for j, e in pairs if j and e),
             "judge_yes_env_no": sum(1 for j, e in pairs if j and not e),
             "judge_no_env_yes": sum(1 for j, e in pairs if not j and e),
             "judge_no_env_no": sum(1 for j, e in pairs if not j and not e)}
    if n == 0:
        return {"episodes": 0, "accuracy": None, "cohen_kappa": None, "confusion": table,
                "mean_abs_score_minus_reward": None}
    observed = (table["judge_yes_env_yes"] + table["judge_no_env_no"]) / n
    judge_yes = (table["judge_yes_env_yes"] + table["judge_yes_env_no"]) / n
    env_yes = (table["judge_yes_env_yes"] + table["judge_no_env_yes"]) / n
    expected = judge_yes * env_yes + (1 - judge_yes) * (1 - env_yes)
    kappa = None if expected == 1 else (observed - expected) / (1 - expected)
    diffs = [abs(float(r["verdict"]["score"]) - float(r["environment"]["reward"] or 0.0)) for r in rows]
    return {"episodes": n, "accuracy": observed, "cohen_kappa": kappa, "confusion": table,
            "mean_abs_score_minus_reward": sum(diffs) / n}


def judge_run(run_dir: str | Path, out_dir: str | Path, model: Any, *, max_attempts: int = 3,
              resume: bool = True) -> dict[str, Any]:
    """Judge every completed episode of *run_dir* with *model* (an ``AnalystModel``); return the summary.

    Raises:
        TraceFormatError: no traces file in *run_dir*.
        InferenceError: the judge endpoint failed past its retries.
    """
    from shopsimrl_core.analysis._labels import iter_latest_records
    from shopsimrl_core.episode._trace import is_complete
    from shopsimrl_core.skills.trace2skill._structured import StructuredOutputError, structured_call

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ledger = out / "judgements.jsonl"
    done: dict[str, dict[str, Any]] = {}
    if resume and ledger.is_file():
        for line in ledger.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            done[row["input_fingerprint"]] = row
    records = [r for r in iter_latest_records(Path(run_dir) / "traces.jsonl") if is_complete(r)]
    errors: list[dict[str, Any]] = []
    rubric = {"rubric_id": RUBRIC["rubric_id"], "version": RUBRIC["version"], "sha256": _RUBRIC_SHA256}
    rows: list[dict[str, Any]] = []

    async def main() -> None:
        async with model:
            for record in records:
                payload = _payload(record)
                fp = fingerprint({"rubric": rubric, "model": model.identity, "input": payload})
                if fp in done:
                    rows.append(done[fp])
                    continue
                messages = [{"role": "system", "content": RUBRIC["system"]},
                            {"role": "user", "content": json.dumps(payload, ensure_ascii=False, separators=(",", ":"))}]
                try:
                    result = await structured_call(model, messages, [RUBRIC["tool"]], validate=_validate,
                                                   max_attempts=max_attempts, what=f"judge of {record['episode_id']}")
                except (StructuredOutputError, ShopSimRLError) as exc:
                    errors.append({"episode_id": record["episode_id"], "message": exc.one_line()})
                    continue
                detail = json_object(json_object(record.get("final")).get("reward_detail"))
                row = {"episode_id": record["episode_id"], "input_fingerprint": fp, "rubric": rubric,
                       "model": model.identity, "raw_output": result.raw_arguments, "attempts": result.attempts,
                       "invalid_attempts": result.invalid_attempts,
                       "verdict": {"satisfied": result.arguments["satisfied"],
                                   "score": float(result.arguments["score"]),
                                   "rationale": result.arguments["rationale"]},
                       "environment": {"reward": record["final"].get("reward"), "r_success": detail.get("r_success")},
                       "created_at": _now()}
                with open(ledger, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps(row, ensure_ascii=False) + "\n")
                rows.append(row)

    asyncio.run(main())
    summary = {"schema_version": JUDGE_SCHEMA, "created_at": _now(), "run_dir": str(run_dir), "rubric": rubric,
               "model": model.identity, "episodes": len(records), "judged": len(rows), "errors": errors,
               "inside_rollout": False, "agreement": agreement(rows)}
    write_json_atomic(out / "judge_summary.json", summary)
    return summary

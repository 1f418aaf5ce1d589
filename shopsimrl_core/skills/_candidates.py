"""Skill candidates: procedural hints proposed from labelled TRAIN-split episodes.

Pipeline (deterministic for the rule-based miner):

1. Refuse any evidence that is not from the ``train`` split (runtime-semantics §18.3, §22.6): gates use val,
   final numbers use test, and neither may shape the skills they judge.
2. Group episodes by failure label (outcome classes and behaviour labels, see ``_labels``) and keep
   the groups with at least ``min_support`` episodes ("frequent" labels).
3. For each group collect contrasting evidence: successful episodes of the same situation (same task
   first, then the same category, then any success) with the steps that made them work.
4. Ask a ``CandidateProvider`` for chunks (title, workflow stage, applies-when, procedure,
   verification, common failure) and render them in the chunk format of runtime-semantics §18.4.
5. Validate and firewall every chunk (``_firewall``); rejected candidates are kept with the reason.

The result is ``skill_candidates.json`` (``shopsimrl-skill-candidates-v1``), every candidate carrying
evidence references ``{episode_id, step_index, role, label}``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from shopsimrl_core._errors import SkillError
from shopsimrl_core._hashing import fingerprint, sha256_file, write_json_atomic
from shopsimrl_core._versions import SKILL_CANDIDATES_SCHEMA
from shopsimrl_core.analysis._labels import iter_latest_records, read_labels
from shopsimrl_core.skills._firewall import FirewallContext, check_text, context_from_traces
from shopsimrl_core.skills._templates import GENERIC_INVALID as _GENERIC_INVALID
from shopsimrl_core.skills._templates import GENERIC_PROTOCOL as _GENERIC_PROTOCOL
from shopsimrl_core.skills._templates import TEMPLATES as _TEMPLATES

__all__ = [
    "FailureGroup",
    "CandidateProvider",
    "RuleBasedMiner",
    "CandidateSet",
    "chunk_id_for",
    "render_chunk",
    "validate_chunk",
    "build_failure_groups",
    "propose_candidates",
    "mine_candidates",
    "require_train_only",
    "MINED_LABEL_PREFIXES",
]

# Labels that describe agent behaviour worth a skill. "failed" (a crashed attempt) and "other" are
# infrastructure, not behaviour, so no skill can fix them.
MINED_LABEL_PREFIXES = ("outcome:", "behaviour:first_buy_incomplete_options", "behaviour:loop", "budget:ignored",
                        "invalid_action:", "protocol_error:")
_NOT_MINED = {"outcome:success", "outcome:failed", "outcome:other"}
_TEXT_FIELDS = ("title", "workflow_stage", "applicable_when", "verification", "common_failure")
_SANITISE = re.compile(r"[^A-Za-z0-9._-]+")


# --------------------------------------------------------------------------- chunk format


def _sanitise(name: str) -> str:
    return _SANITISE.sub("-", name.strip()).strip("-.")


def chunk_id_for(title: str, evidence_cluster_ids: Sequence[str]) -> str:
    """Chunk id of runtime-semantics §18.4: ``sanitise(title).lower()``, else ``chunk-`` + 12 hex of a fingerprint."""
    sanitised = _sanitise(title).lower()
    if sanitised:
        return sanitised
    digest = fingerprint({"title": title, "evidence_cluster_ids": sorted(evidence_cluster_ids)})
    return "chunk-" + digest[:12]


def render_chunk(chunk: dict[str, Any]) -> str:
    """The SkillBank ``content`` of a chunk, in the exact text layout of runtime-semantics §18.4."""
    lines = [f"### {chunk['title'].strip()}", "", f"- Applies when: {chunk['applicable_when'].strip()}", "- Procedure:"]
    for number, step in enumerate(chunk["procedure"], start=1):
        lines.append(f"  {number}. {step.strip()}")
    lines.append(f"- Verify: {chunk['verification'].strip()}")
    lines.append(f"- Avoid: {chunk['common_failure'].strip()}")
    return "\n".join(lines)


def validate_chunk(chunk: Any) -> str | None:
    """Return why a proposed chunk is not well-formed, or None when it is."""
    if not isinstance(chunk, dict):
        return "chunk must be an object"
    for key in _TEXT_FIELDS:
        value = chunk.get(key)
        if not isinstance(value, str) or not value.strip():
            return f"{key} must be a non-blank string"
    procedure = chunk.get("procedure")
    if not isinstance(procedure, list) or not 1 <= len(procedure) <= 8:
        return "procedure must be a list of 1-8 steps"
    if not all(isinstance(step, str) and step.strip() for step in procedure):
        return "every procedure step must be a non-blank string"
    if len(render_chunk(chunk)) > 1500:
        return "chunk text is longer than 1500 characters"
    return None


# --------------------------------------------------------------------------- groups


@dataclass
class FailureGroup:
    """Episodes sharing one failure label, with contrasting successes of the same situation."""

    label: str
    support: int
    failures: list[dict[str, Any]] = field(default_factory=list)
    """Per failing episode: ``{episode_id, task_id, category, steps: [evidence step indexes]}``."""
    contrasts: list[dict[str, Any]] = field(default_factory=list)
    """Per contrasting success: ``{episode_id, task_id, match: task|category|any, steps}``."""
    digest: list[dict[str, Any]] = field(default_factory=list)
    """Compact, identifier-redacted step excerpts for model-based providers (not used by the miner)."""

    @property
    def cluster_id(self) -> str:
        return "failure-label-" + _sanitise(self.label.replace(":", "-")).lower()

    def evidence_refs(self) -> list[dict[str, Any]]:
        refs = []
        for item in self.failures:
            for step in item["steps"] or [None]:
                refs.append(
                    {"episode_id": item["episode_id"], "step_index": step, "role": "failure", "label": self.label}
                )
        for item in self.contrasts:
            for step in item["steps"] or [None]:
                refs.append(
                    {
                        "episode_id": item["episode_id"],
                        "step_index": step,
                        "role": "contrast_success",
                        "label": "outcome:success",
                        "match": item["match"],
                    }
                )
        return refs


def require_train_only(splits: Iterable[Any], source: str) -> None:
    """Refuse evidence from any split other than ``train``.

    Raises:
        SkillError (code ``evidence-not-train``): a val, test or unknown split is present.
    """
    bad = sorted({str(s) for s in splits if s != "train"})
    if bad:
        raise SkillError(
            f"{source}: skill candidates read train-split evidence only, found split(s) {bad}; "
            "point skill building at a train-suite run (val is for gates, test for final numbers)",
            code="evidence-not-train",
            splits=bad,
        )


def _is_mined(label: str) -> bool:
    return label not in _NOT_MINED and label.startswith(MINED_LABEL_PREFIXES)


def build_failure_groups(
    rows: Sequence[dict[str, Any]], *, min_support: int = 2, max_examples: int = 5, max_contrasts: int = 3
) -> list[FailureGroup]:
    """Group label rows by failure label; keep labels carried by at least *min_support* episodes.

    Groups are ordered by support (descending) then label, and each group's examples by episode id,
    so the same rows always give the same groups.
    """
    ordered = sorted(rows, key=lambda r: r["episode_id"])
    evidence = {r["episode_id"]: json.loads(r["evidence_json"]) for r in ordered}
    by_label: dict[str, list[dict[str, Any]]] = {}
    for row in ordered:
        for label in row["labels"]:
            if _is_mined(label):
                by_label.setdefault(label, []).append(row)
    successes = [r for r in ordered if r["outcome"] == "success"]
    groups: list[FailureGroup] = []
    for label, members in by_label.items():
        if len(members) < min_support:
            continue
        group = FailureGroup(label=label, support=len(members))
        member_ids = {m["episode_id"] for m in members}
        for row in members[:max_examples]:
            steps = evidence[row["episode_id"]].get(label, [])
            group.failures.append(
                {
                    "episode_id": row["episode_id"],
                    "task_id": row["task_id"],
                    "category": row["category"],
                    "steps": list(steps),
                }
            )
        seen: set[str] = set()
        for match in ("task", "category", "any"):
            for row in members[:max_examples]:
                for s in successes:
                    if len(group.contrasts) >= max_contrasts:
                        break
                    if s["episode_id"] in seen or s["episode_id"] in member_ids:
                        continue
                    same = {
                        "task": s["task_id"] == row["task_id"],
                        "category": s["category"] is not None and s["category"] == row["category"],
                        "any": True,
                    }[match]
                    if same:
                        seen.add(s["episode_id"])
                        steps = sorted(
                            set((s.get("option_steps") or []) + ([s["purchase_step"]] if s["purchase_step"] else []))
                        )
                        group.contrasts.append(
                            {"episode_id": s["episode_id"], "task_id": s["task_id"], "match": match, "steps": steps}
                        )
        groups.append(group)
    groups.sort(key=lambda g: (-g.support, g.label))
    return groups


# --------------------------------------------------------------------------- providers


class CandidateProvider(Protocol):
    """Anything that turns one failure group into proposed chunks (dicts with the chunk fields)."""

    identity: dict[str, Any]

    def propose(self, group: FailureGroup) -> list[dict[str, Any]]: ...


class RuleBasedMiner:
    """Deterministic, offline provider: one project-written template per failure label.

    Templates never quote instance data (ids, titles, brands, options), so what they produce is
    deployable by construction; the firewall still checks them like any other provider's output.
    """

    identity: dict[str, Any] = {
        "provider": "rule_based_miner",
        "version": "shopsimrl-rule-miner-v1",
        "templates_sha256": fingerprint(
            {"templates": _TEMPLATES, "invalid": _GENERIC_INVALID, "protocol": _GENERIC_PROTOCOL}
        ),
    }

    def propose(self, group: FailureGroup) -> list[dict[str, Any]]:
        """Return the template chunk of the group's label (a copy), or the generic one of its family."""
        template = _TEMPLATES.get(group.label)
        if template is None and group.label.startswith("invalid_action:"):
            template = _GENERIC_INVALID
        if template is None and group.label.startswith("protocol_error:"):
            template = _GENERIC_PROTOCOL
        if template is None:
            return []
        return [json.loads(json.dumps(template))]


# --------------------------------------------------------------------------- mining


@dataclass(frozen=True)
class CandidateSet:
    """The written candidates document and headline counts."""

    path: Path
    document: dict[str, Any]

    @property
    def accepted(self) -> list[dict[str, Any]]:
        return [c for c in self.document["candidates"] if c["status"] == "accepted"]

    @property
    def rejected(self) -> list[dict[str, Any]]:
        return [c for c in self.document["candidates"] if c["status"] == "rejected"]


def propose_candidates(
    groups: Sequence[FailureGroup],
    provider: CandidateProvider,
    firewall: FirewallContext,
    *,
    max_accepted: int = 16,
) -> list[dict[str, Any]]:
    """Ask *provider* for chunks per group, validate, firewall, dedupe and number them.

    Returns candidate records with ``status`` ``accepted`` or ``rejected`` (``reason`` says why:
    ``invalid: …``, ``firewall: code(match), …``, ``duplicate_of: <id>`` or ``over_cap``).
    """
    out: list[dict[str, Any]] = []
    by_content: dict[str, str] = {}
    used_ids: dict[str, str] = {}
    accepted = 0
    for group in groups:
        try:
            proposals = provider.propose(group)
        except SkillError as exc:  # a provider that cannot produce valid output rejects, never aborts
            proposals = [{"__error__": exc.one_line()}]
        for chunk in proposals:
            record: dict[str, Any] = {
                "candidate_id": None,
                "status": "accepted",
                "reason": None,
                "source_label": group.label,
                "support": group.support,
                "provider": provider.identity.get("provider"),
                "evidence_cluster_ids": [group.cluster_id],
                "evidence": group.evidence_refs(),
                "firewall_findings": [],
            }
            if isinstance(chunk, dict) and "__error__" in chunk:
                record.update(status="rejected", reason="invalid: " + chunk["__error__"])
                record["candidate_id"] = f"rejected-{len(out) + 1:03d}"
                out.append(record)
                continue
            problem = validate_chunk(chunk)
            if problem is not None:
                record.update(status="rejected", reason="invalid: " + problem, raw=chunk)
                record["candidate_id"] = f"rejected-{len(out) + 1:03d}"
                out.append(record)
                continue
            fields = {k: chunk[k].strip() for k in _TEXT_FIELDS}
            fields["procedure"] = [s.strip() for s in chunk["procedure"]]
            content = render_chunk(fields)
            record.update(fields)
            record["content"] = content
            record["content_sha256"] = fingerprint(content)  # JSON-quoted string convention, runtime-semantics §2.2
            base_id = chunk_id_for(fields["title"], record["evidence_cluster_ids"])
            cid, n = base_id, 1
            while cid in used_ids and used_ids[cid] != record["content_sha256"]:
                n += 1
                cid = f"{base_id}-{n}"
            record["candidate_id"] = cid
            findings = check_text(content, firewall)
            if findings:
                record.update(
                    status="rejected",
                    firewall_findings=[f.to_dict() for f in findings],
                    reason="firewall: " + ", ".join(f"{f.code}({f.match})" for f in findings),
                )
            elif record["content_sha256"] in by_content:
                record.update(status="rejected", reason="duplicate_of: " + by_content[record["content_sha256"]])
                record["candidate_id"] = cid + "-dup"
            elif accepted >= max_accepted:
                record.update(status="rejected", reason=f"over_cap: at most {max_accepted} accepted candidates")
            else:
                accepted += 1
                by_content[record["content_sha256"]] = cid
                used_ids[cid] = record["content_sha256"]
            out.append(record)
    return out


def mine_candidates(
    labels_path: str | Path,
    traces_path: str | Path,
    out_path: str | Path,
    *,
    provider: CandidateProvider | None = None,
    min_support: int = 2,
    max_accepted: int = 16,
) -> CandidateSet:
    """Mine skill candidates from a TRAIN run's labels and traces and write ``skill_candidates.json``.

    Deterministic with the default ``RuleBasedMiner``: the same labels and traces give the same
    document except ``created_at``; ``candidates_sha256`` covers everything but the time.

    Raises:
        SkillError (``evidence-not-train``): a label row or trace is not from the train split.
        SkillError (``redacted-evidence``): the traces are an export (their goals are gone).
        TraceFormatError: the labels table or traces file is missing or of an unknown version.
    """
    provider = provider or RuleBasedMiner()
    df = read_labels(labels_path)
    require_train_only(df.get_column("split").to_list(), str(labels_path))
    records = list(iter_latest_records(traces_path))
    require_train_only([(r.get("job") or {}).get("split") for r in records], str(traces_path))
    if any("redaction" in r for r in records):
        # The firewall needs the private goal (titles, gold options) that exports remove.
        raise SkillError(
            f"{traces_path}: holds exported (redacted) traces; mine the raw run directory instead",
            code="redacted-evidence",
        )
    rows = df.to_dicts()
    label_ids = {r["episode_id"] for r in rows}
    trace_ids = {r["episode_id"] for r in records}
    if label_ids != trace_ids:
        raise SkillError(
            f"{labels_path}: labels cover {len(label_ids)} episodes but {traces_path} has {len(trace_ids)}; "
            "re-materialize episode_labels for these traces",
            code="labels-out-of-date",
        )
    firewall = context_from_traces(records)
    groups = build_failure_groups(rows, min_support=min_support)
    if hasattr(provider, "attach_traces"):
        provider.attach_traces({r["episode_id"]: r for r in records})  # model-based providers need step excerpts
    candidates = propose_candidates(groups, provider, firewall, max_accepted=max_accepted)
    support: dict[str, int] = {}
    for row in rows:
        for label in row["labels"]:
            if _is_mined(label):
                support[label] = support.get(label, 0) + 1
    core: dict[str, Any] = {
        "schema_version": SKILL_CANDIDATES_SCHEMA,
        "provider": provider.identity,
        "source": {
            "labels_path": str(labels_path),
            "labels_sha256": sha256_file(labels_path),
            "traces_path": str(traces_path),
            "traces_sha256": sha256_file(traces_path),
            "episodes": len(rows),
            "splits": {"train": len(rows)},
            "train_only": True,
        },
        "min_support": min_support,
        "max_accepted": max_accepted,
        "label_support": dict(sorted(support.items())),
        "frequent_labels": [g.label for g in groups],
        "accepted_count": sum(1 for c in candidates if c["status"] == "accepted"),
        "rejected_count": sum(1 for c in candidates if c["status"] == "rejected"),
        "candidates": candidates,
    }
    document = {
        "schema_version": SKILL_CANDIDATES_SCHEMA,
        "created_at": datetime.now(UTC).isoformat(),
        **{k: v for k, v in core.items() if k != "schema_version"},
        "candidates_sha256": fingerprint(
            {k: v for k, v in core.items() if k != "source"}
            | {"source": {k: v for k, v in core["source"].items() if not k.endswith("_path")}}
        ),
    }
    target = write_json_atomic(out_path, document)
    return CandidateSet(path=target, document=document)

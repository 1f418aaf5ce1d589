"""Building SkillBank files: the cold-start draft and immutable, hash-named snapshots.

- ``build_draft`` turns accepted candidates into ``initial_skill_draft.json``
  (``shopsimrl-initial-skill-draft-v2``) and its draft SkillBank (runtime-semantics §18.5); Gate A reads both.
- ``build_skillbank`` dedupes records, assigns ``content_sha256 = fingerprint(content)`` (the
  JSON-quoted string, runtime-semantics §2.2) and returns a ``shopsimrl-skillbank-v1`` object.
- ``snapshot_skillbank`` writes a bank as ``skillbank-<bank_sha256>.json``. The name is the hash of
  the parsed content, so a snapshot is immutable: writing the same bank again reuses the file, and a
  file whose content no longer matches its name is refused.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shopsimrl_core._errors import SkillError
from shopsimrl_core._hashing import fingerprint, write_json_atomic, write_text_atomic
from shopsimrl_core._versions import INITIAL_DRAFT_SCHEMA, SKILLBANK_SCHEMA
from shopsimrl_core.documents._skills import SkillBank
from shopsimrl_core.skills._firewall import check_text

__all__ = ["build_draft", "build_skillbank", "snapshot_skillbank", "SkillBankSnapshot", "write_draft"]

MAX_DRAFT_CHUNKS = 16


def build_skillbank(
    records: Sequence[dict[str, Any]],
    *,
    bank_version: str,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Return a ``shopsimrl-skillbank-v1`` bank of *records*, deduplicated, in the given order.

    Each record needs ``skill_id`` and ``content``; ``version`` defaults to ``"1"``, ``enabled`` to
    true. A later record with the same content or the same id as an earlier one is dropped. Every
    record is firewalled with the pattern checks (runtime-semantics §18.3: chunks get the first three).

    Raises:
        SkillError (``firewall-finding``): a record's content fails the firewall.
        SkillError (``skillbank-invalid``): a record without an id or with blank content.
    """
    skills: list[dict[str, Any]] = []
    seen_ids: set[str] = set()
    seen_content: set[str] = set()
    for i, raw in enumerate(records):
        skill_id = raw.get("skill_id")
        content = raw.get("content")
        if not isinstance(skill_id, str) or not skill_id or not isinstance(content, str) or not content.strip():
            raise SkillError(f"skills[{i}]: needs a non-empty skill_id and non-blank content", code="skillbank-invalid")
        findings = check_text(content)
        if findings:
            raise SkillError(
                f"skills[{i}] ({skill_id}): firewall finding {findings[0].code} ({findings[0].match!r}); "
                "remove instance data from the chunk", code="firewall-finding")
        digest = fingerprint(content)
        if skill_id in seen_ids or digest in seen_content:
            continue
        seen_ids.add(skill_id)
        seen_content.add(digest)
        record: dict[str, Any] = {"skill_id": skill_id, "version": str(raw.get("version", "1")),
                                  "enabled": raw.get("enabled", True) is not False, "content": content}
        if raw.get("task_ids") is not None:
            record["task_ids"] = list(raw["task_ids"])
        record["metadata"] = dict(raw.get("metadata") or {})
        record["content_sha256"] = digest
        skills.append(record)
    return {"schema_version": SKILLBANK_SCHEMA, "bank_version": str(bank_version), "metadata": dict(metadata or {}),
            "skills": skills}


def build_draft(
    candidates: dict[str, Any],
    *,
    skill_title: str = "ShopSim 购物技能草案",
    active_skill_budget: int = 10,
    validation_dimension_cap: int = MAX_DRAFT_CHUNKS,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Turn a candidates document into ``(initial_skill_draft, initial_skillbank)`` (runtime-semantics §18.5).

    Takes accepted candidates in document order, at most ``validation_dimension_cap`` (≤ 16).

    Raises:
        SkillError (``no-candidates``): no accepted candidate to draft from.
        SkillError (``draft-invalid``): cap or budget outside ``1 ≤ budget ≤ cap ≤ 16``.
    """
    if (
        not 1 <= validation_dimension_cap <= MAX_DRAFT_CHUNKS
        or not 1 <= active_skill_budget <= validation_dimension_cap
    ):
        raise SkillError(
            f"draft: need 1 <= active_skill_budget ({active_skill_budget}) <= validation_dimension_cap "
            f"({validation_dimension_cap}) <= {MAX_DRAFT_CHUNKS}",
            code="draft-invalid",
        )
    accepted = [c for c in candidates.get("candidates", []) if c.get("status") == "accepted"]
    if not accepted:
        raise SkillError(
            "candidates: no accepted candidate; nothing to draft (lower min_support or add traces)",
            code="no-candidates",
        )
    chunks = []
    for order, cand in enumerate(accepted[:validation_dimension_cap], start=1):
        chunks.append(
            {
                "chunk_id": cand["candidate_id"],
                "order": order,
                "title": cand["title"],
                "workflow_stage": cand["workflow_stage"],
                "applicable_when": cand["applicable_when"],
                "procedure": list(cand["procedure"]),
                "verification": cand["verification"],
                "common_failure": cand["common_failure"],
                "evidence_cluster_ids": list(cand["evidence_cluster_ids"]),
                "source_label": cand.get("source_label"),
                "content": cand["content"],
            }
        )
    draft = {
        "schema_version": INITIAL_DRAFT_SCHEMA,
        "stage": "cold_start_draft_pre_validation",
        "gate_status": {"gate_a": "not_run", "gate_b": "not_run"},
        "validation_dimension_cap": validation_dimension_cap,
        "active_skill_budget": min(active_skill_budget, len(chunks)),
        "skill_title": skill_title,
        "chunks": chunks,
        "evidence_only_cluster_ids": [],
        "conflicts_resolved": [],
        "candidates_sha256": candidates.get("candidates_sha256"),
    }
    bank = build_skillbank(
        [
            {
                "skill_id": c["chunk_id"],
                "version": "draft-1",
                "enabled": True,
                "content": c["content"],
                "metadata": {
                    "workflow_stage": c["workflow_stage"],
                    "draft_only": True,
                    "evidence_cluster_ids": c["evidence_cluster_ids"],
                    "validation_result": None,
                },
            }
            for c in chunks
        ],
        bank_version="cold-start-draft-pre-validation",
        metadata={"skill_title": skill_title, "draft_sha256": fingerprint(draft)},
    )
    return draft, bank


def write_draft(draft: dict[str, Any], bank: dict[str, Any], out_dir: str | Path) -> tuple[Path, Path]:
    """Write ``initial_skill_draft.json``, ``initial_skill_draft.md`` and ``initial_skillbank.json``."""
    out = Path(out_dir)
    draft_path = write_json_atomic(out / "initial_skill_draft.json", draft)
    md = [f"# {draft['skill_title']}", "", "> Cold-start draft; not active until Gate A and Gate B pass.", ""]
    md.append("\n\n".join(c["content"] for c in draft["chunks"]))
    write_text_atomic(out / "initial_skill_draft.md", "\n".join(md) + "\n")
    bank_path = write_json_atomic(out / "initial_skillbank.json", bank)
    return draft_path, bank_path


@dataclass(frozen=True)
class SkillBankSnapshot:
    """An immutable SkillBank file and its identity."""

    path: Path
    bank_sha256: str
    bank_version: str
    skill_ids: list[str]
    reused: bool


def snapshot_skillbank(bank: SkillBank | dict[str, Any], out_dir: str | Path) -> SkillBankSnapshot:
    """Write *bank* as ``<out_dir>/skillbank-<bank_sha256>.json`` unless that file already exists.

    Validates with the runtime's SkillBank loader rules before writing and reloads the file after
    writing, so what is on disk is exactly what a run will inject (and its ``bank_sha256`` is the
    one the run's provenance will record). *bank* is the model ``load_skillbank`` returns (written as
    its ``to_json()``) or a parsed bank object such as ``build_skillbank``'s.

    Raises:
        SkillError (``snapshot-corrupt``): an existing file with this name holds other content.
        ConfigError: the bank breaks a §11.2 rule.
    """
    from shopsimrl_core.episode._skillbank import as_skillbank, bank_sha256, load_skillbank

    model = as_skillbank(bank, "<snapshot>")
    document = model.to_json()
    digest = bank_sha256(document)
    target = Path(out_dir) / f"skillbank-{digest}.json"
    reused = target.exists()
    if reused:
        if bank_sha256(load_skillbank(target)) != digest:
            raise SkillError(
                f"{target}: content does not match the hash in its name; delete the file and rebuild",
                code="snapshot-corrupt",
            )
    else:
        write_json_atomic(target, document)
        if bank_sha256(json.loads(target.read_text(encoding="utf-8"))) != digest:
            raise SkillError(f"{target}: written bank does not reproduce its hash", code="snapshot-corrupt")
    return SkillBankSnapshot(
        path=target,
        bank_sha256=digest,
        bank_version=str(model.bank_version),
        skill_ids=[s.skill_id for s in model.skills],
        reused=reused,
    )

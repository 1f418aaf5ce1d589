"""``skillbank_snapshot[ckpt]``: the Gate-A-selected SkillBank frozen as ``skillbank-<bank_sha256>.json``.

The blocking check ``snapshot_reproduces_hash`` reloads the file and reproduces its hashes; the
table shows each frozen skill with the noise verdict of the gate run that selected it.
"""

import json
from collections.abc import Iterator
from typing import Any

import dagster as dg

import shopsimrl_core as core
from shopsimrl_core import check_text, load_skillbank, snapshot_skillbank
from shopsimrl_core.documents import ChunkContributions, SkillBank, SkillBankPointer

from .checks import check_result
from .failures import as_failure
from .optional import optional_asset
from .resources import EvaluationSuites, RunStorage
from .skill_gate import GATE
from .skill_tables import noise_metadata, snapshot_skill_table

__all__ = ["SNAPSHOT", "SNAPSHOT_HASH", "build_skillbank_snapshot"]

SNAPSHOT = dg.AssetKey("skillbank_snapshot")
SNAPSHOT_HASH = "snapshot_reproduces_hash"


def _gate_contributions(gate_dir: Any, bank: SkillBank, context: Any) -> ChunkContributions | None:
    """The Gate A contributions that selected *bank* (same assignment), or None with a log line."""
    path = gate_dir / "contributions.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        doc = ChunkContributions.parse(data, str(path))
    except (OSError, json.JSONDecodeError, core.ShopSimRLError) as exc:
        context.log.warning(f"skillbank_snapshot: no noise verdicts ({path}: {exc}); the table shows β only")
        return None
    if doc.assignment_sha256 != (bank.metadata or {}).get("assignment_sha256"):
        context.log.warning(f"skillbank_snapshot: {path} is of another gate run; the table shows β only")
        return None
    return doc


def build_skillbank_snapshot(group: str) -> dg.AssetsDefinition:
    """``skillbank_snapshot``, downstream of ``skill_gate``."""

    @optional_asset(
        SNAPSHOT,
        name="skillbank_snapshot",
        deps=[GATE],
        group=group,
        kinds={"json"},
        description="The Gate-A-selected SkillBank frozen as an immutable skillbank-<bank_sha256>.json.",
        checks=[
            (
                SNAPSHOT_HASH,
                "The snapshot file reloads as a valid shopsimrl-skillbank-v1 bank, its name is its bank_sha256, "
                "every content_sha256 reproduces, and the firewall finds nothing.",
            )
        ],
    )
    def skillbank_snapshot(
        context: dg.AssetExecutionContext, run_storage: RunStorage, evaluation_suites: EvaluationSuites
    ) -> Iterator[Any]:
        checkpoint_id = context.partition_key
        selected = run_storage.gate_dir(checkpoint_id) / "selected_skillbank.json"
        if not selected.is_file():
            context.log.info(f"skillbank_snapshot not materialized: Gate A has not selected a bank for {checkpoint_id}")
            return
        with as_failure():
            bank = load_skillbank(selected)
            snap = snapshot_skillbank(bank, run_storage.skillbanks_dir())
            reloaded = load_skillbank(snap.path)
        content_ok = all(s.content_sha256 == core.fingerprint(s.content) for s in reloaded.skills)
        leaks = [s.skill_id for s in reloaded.skills if check_text(s.content)]
        ok = (
            core.fingerprint(reloaded.to_json()) == snap.bank_sha256
            and snap.path.name == f"skillbank-{snap.bank_sha256}.json"
            and content_ok
            and not leaks
        )
        pointer = run_storage.skills_dir(checkpoint_id) / "snapshot.json"
        document = SkillBankPointer.parse(
            {
                "schema_version": SkillBankPointer.SCHEMA,
                "checkpoint_id": checkpoint_id,
                "path": str(snap.path),
                "bank_sha256": snap.bank_sha256,
                "bank_version": snap.bank_version,
                "skill_ids": snap.skill_ids,
            },
            str(pointer),
        )
        core.write_json_atomic(pointer, document.to_json())
        contributions = _gate_contributions(run_storage.gate_dir(checkpoint_id), reloaded, context)
        rows, schema = snapshot_skill_table(reloaded.skills, contributions)
        rel = (
            snap.path.relative_to(run_storage.root_path)
            if snap.path.is_relative_to(run_storage.root_path)
            else snap.path
        )
        settings = evaluation_suites.settings()
        yield dg.MaterializeResult(
            asset_key=SNAPSHOT,
            metadata={
                "status": "frozen" if reloaded.skills else "frozen (Gate A selected no chunk: the bank is empty)",
                "path": dg.MetadataValue.path(str(snap.path)),
                "bank_sha256": snap.bank_sha256,
                "bank_version": snap.bank_version,
                "skills": len(snap.skill_ids),
                "selected_skills": dg.MetadataValue.table(rows, schema=schema),
                **(noise_metadata(contributions, selected_only=True) if contributions else {}),
                "reused_existing_file": snap.reused,
                "pointer": dg.MetadataValue.path(str(pointer)),
                "inject_with": f"skills.path: {snap.path}",
                "skillbank_in_viewer": dg.MetadataValue.url(
                    f"{settings.viewer.base_url.rstrip('/')}/skillbank?path={rel}"
                ),
            },
            data_version=dg.DataVersion(snap.bank_sha256[:16]),
            check_results=[
                check_result(
                    SNAPSHOT_HASH,
                    ok,
                    "snapshot reloads and reproduces its hashes"
                    if ok
                    else f"hash or firewall problem (content hashes ok: {content_ok}; leaks: {leaks})",
                    asset_key=SNAPSHOT,
                )
            ],
        )

    return skillbank_snapshot

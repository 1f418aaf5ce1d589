"""Consolidation of evidence cards into clusters, and the compiler from clusters to ≤ 16 chunks.

runtime-semantics §18.2 steps 5–6 and §18.4.

Clusters and chunks are deployable content: they are checked with the three pattern checks of the
firewall (§18.3), and any finding is invalid output that triggers a repair attempt.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shopsimrl_core.skills import check_text
from shopsimrl_core.skills._candidates import chunk_id_for, render_chunk, validate_chunk
from shopsimrl_core.skills.trace2skill._cards import firewall_message
from shopsimrl_core.skills.trace2skill._prompts import (
    CARD_TEXT_FIELDS,
    CLUSTER_TEXT_FIELDS,
    DEPLOYABLE_FIELDS,
    EVIDENCE_CLUSTER_SCHEMA,
    SYSTEM,
    TOOLS,
)
from shopsimrl_core.skills.trace2skill._structured import AnalystModel, StructuredResult, compact, structured_call

__all__ = ["card_view", "batches", "consolidate_batch", "compile_skill", "number_chunks", "MAX_CLUSTERS",
           "MAX_CHUNKS"]

MAX_CLUSTERS = 12
MAX_CHUNKS = 16


def card_view(card: dict[str, Any]) -> dict[str, Any]:
    """What the consolidator sees of a card: its id and deployable text, never the privileged audit."""
    if card["channel"] == "success":
        return {"card_id": card["card_id"], **{k: card[k] for k in CARD_TEXT_FIELDS}}
    deploy = card["deployable_abstraction"]
    return {"card_id": card["card_id"], "status": card["status"],
            **{k: deploy[k] for k in DEPLOYABLE_FIELDS if deploy.get(k)}}


def batches(cards: Sequence[dict[str, Any]], batch_size: int) -> list[tuple[str, int, list[dict[str, Any]]]]:
    """Eligible cards split by channel (success first, then failure) into ``(channel, n, cards)`` batches."""
    out = []
    for channel in ("success", "failure"):
        eligible = [c for c in cards if c["channel"] == channel and c.get("eligible_for_consolidation")]
        for n, start in enumerate(range(0, len(eligible), batch_size), start=1):
            out.append((channel, n, eligible[start:start + batch_size]))
    return out


def _check_clusters(card_ids: Sequence[str]) -> Any:
    limit = min(MAX_CLUSTERS, len(card_ids))
    known = set(card_ids)

    def validate(name: str, args: dict[str, Any]) -> str | None:
        clusters, only = args.get("clusters"), args.get("evidence_only_card_ids")
        if not isinstance(clusters, list) or not isinstance(only, list):
            return "clusters and evidence_only_card_ids must be lists"
        if len(clusters) > limit:
            return f"at most {limit} clusters, got {len(clusters)}"
        seen: list[str] = []
        for i, cluster in enumerate(clusters):
            if not isinstance(cluster, dict):
                return f"clusters[{i}] must be an object"
            for key in CLUSTER_TEXT_FIELDS:
                if not isinstance(cluster.get(key), str) or not cluster[key].strip():
                    return f"clusters[{i}].{key} must be a non-blank string"
            ids = cluster.get("evidence_card_ids")
            if not isinstance(ids, list) or not ids or not all(isinstance(x, str) for x in ids):
                return f"clusters[{i}].evidence_card_ids must be a non-empty list of card ids"
            seen += ids
            findings = check_text("\n".join(cluster[k] for k in CLUSTER_TEXT_FIELDS))
            if findings:
                return f"clusters[{i}]: " + firewall_message(findings)
        if not all(isinstance(x, str) for x in only):
            return "evidence_only_card_ids must hold card ids"
        seen += only
        unknown = sorted(set(seen) - known)
        if unknown:
            return f"unknown card ids {unknown}"
        dupes = sorted({x for x in seen if seen.count(x) > 1})
        if dupes:
            return f"card ids used more than once (clusters must not share cards): {dupes}"
        missing = sorted(known - set(seen))
        if missing:
            return f"every card must be accounted for exactly once; missing {missing}"
        return None

    return validate


def consolidation_messages(channel: str, cards: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The original messages of one consolidation call."""
    limit = min(MAX_CLUSTERS, len(cards))
    return [{"role": "system", "content": SYSTEM["consolidate"].format(max_clusters=limit)},
            {"role": "user", "content": compact({"channel": channel, "max_clusters": limit,
                                                 "cards": [card_view(c) for c in cards]})}]


async def consolidate_batch(model: AnalystModel, channel: str, number: int, cards: Sequence[dict[str, Any]],
                            *, max_attempts: int = 3) -> tuple[list[dict[str, Any]], StructuredResult]:
    """Clusters (``<channel>-batch-NNN-cluster-NN``) of one batch, and the call that made them.

    Raises:
        StructuredOutputError: still invalid after *max_attempts*.
    """
    result = await structured_call(model, consolidation_messages(channel, cards), [TOOLS["submit_clusters"]],
                                   validate=_check_clusters([c["card_id"] for c in cards]),
                                   max_attempts=max_attempts, what=f"consolidation of {channel} batch {number}")
    clusters = [{"schema_version": EVIDENCE_CLUSTER_SCHEMA,
                 "cluster_id": f"{channel}-batch-{number:03d}-cluster-{i:02d}", "channel": channel,
                 **{k: c[k].strip() for k in CLUSTER_TEXT_FIELDS}, "evidence_card_ids": list(c["evidence_card_ids"])}
                for i, c in enumerate(result.arguments["clusters"], start=1)]
    return clusters, result


def _check_skill(cluster_ids: Sequence[str], cap: int) -> Any:
    known = set(cluster_ids)
    limit = min(cap, MAX_CHUNKS)

    def validate(name: str, args: dict[str, Any]) -> str | None:
        title, chunks = args.get("skill_title"), args.get("chunks")
        if not isinstance(title, str) or not title.strip():
            return "skill_title must be a non-blank string"
        if not isinstance(chunks, list) or not 1 <= len(chunks) <= limit:
            return f"chunks must be a list of 1 to {limit} chunks"
        only, conflicts = args.get("evidence_only_cluster_ids"), args.get("conflicts_resolved")
        if not isinstance(only, list) or not isinstance(conflicts, list) or not all(
                isinstance(x, str) for x in [*only, *conflicts]):
            return "evidence_only_cluster_ids and conflicts_resolved must be lists of strings"
        used: list[str] = []
        for i, chunk in enumerate(chunks):
            problem = validate_chunk({k: v for k, v in chunk.items() if k != "evidence_cluster_ids"}
                                     if isinstance(chunk, dict) else chunk)
            if problem:
                return f"chunks[{i}]: {problem}"
            ids = chunk.get("evidence_cluster_ids")
            if not isinstance(ids, list) or not all(isinstance(x, str) for x in ids):
                return f"chunks[{i}].evidence_cluster_ids must be a list of cluster ids"
            used += ids
            findings = check_text(render_chunk(chunk))
            if findings:
                return f"chunks[{i}]: " + firewall_message(findings)
        unknown = sorted(set(used + only) - known)
        if unknown:
            return f"unknown cluster ids {unknown}"
        dupes = sorted({x for x in used if used.count(x) > 1})
        if dupes:
            return f"each cluster may be used by at most one chunk: {dupes}"
        missing = sorted(known - set(used) - set(only))
        if missing:
            return f"every cluster must be accounted for; missing {missing}"
        return None

    return validate


def compile_messages(clusters: Sequence[dict[str, Any]], cap: int) -> list[dict[str, Any]]:
    """The compiler's original messages. It never sees the post-validation budget (§18.2 step 6)."""
    limit = min(cap, MAX_CHUNKS)
    return [{"role": "system", "content": SYSTEM["compile"].format(max_chunks=limit)},
            {"role": "user", "content": compact({"max_chunks": limit, "clusters": [
                {k: c[k] for k in ("cluster_id", "channel", *CLUSTER_TEXT_FIELDS)} for c in clusters]})}]


async def compile_skill(model: AnalystModel, clusters: Sequence[dict[str, Any]], *, cap: int = MAX_CHUNKS,
                        max_attempts: int = 5) -> StructuredResult:
    """The compiler call (``submit_initial_skill``, up to *max_attempts*).

    Raises:
        StructuredOutputError: still invalid after *max_attempts* (its ``invalid_attempts`` go to
            ``compiler_invalid_attempts.jsonl``).
    """
    return await structured_call(model, compile_messages(clusters, cap), [TOOLS["submit_initial_skill"]],
                                 validate=_check_skill([c["cluster_id"] for c in clusters], cap),
                                 max_attempts=max_attempts, what="compiler")


def number_chunks(chunks: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chunk ids (§18.4, collisions ``-2``, ``-3`` …), order and the rendered chunk text; identical texts merged."""
    # Identical chunk text from different clusters is one chunk (a bank keeps content unique): merge evidence.
    merged: dict[str, tuple[dict[str, Any], list[str]]] = {}
    for chunk in chunks:
        fields = {k: chunk[k].strip() for k in ("title", "workflow_stage", "applicable_when", "verification",
                                                "common_failure")}
        fields["procedure"] = [s.strip() for s in chunk["procedure"]]
        entry = merged.setdefault(render_chunk(fields), (fields, []))
        entry[1].extend(chunk["evidence_cluster_ids"])
    out: list[dict[str, Any]] = []
    used: set[str] = set()
    for order, (fields, cluster_ids) in enumerate(merged.values(), start=1):
        chunk = {"evidence_cluster_ids": cluster_ids}
        base = chunk_id_for(fields["title"], chunk["evidence_cluster_ids"])
        cid, n = base, 1
        while cid in used:
            n += 1
            cid = f"{base}-{n}"
        used.add(cid)
        out.append({"chunk_id": cid, "order": order, **fields,
                    "evidence_cluster_ids": list(chunk["evidence_cluster_ids"]), "content": render_chunk(fields)})
    return out

"""How Gate A's chunks and the frozen SkillBank are shown: table rows and the noise-bar metadata.

Presentation only: β, intervals, the noise bar and the adjusted p-values are the core's
(``contributions.json``, the bank's skill metadata); skill text is model-derived and untrusted, so
table cells carry it as capped plain text.
"""

from typing import Any

import dagster as dg

from shopsimrl_core.documents._skills import (
    ChunkContribution,
    ChunkContributions,
    NoiseBar,
    OnlineContribution,
    OnlineContributions,
    SkillRecord,
)

__all__ = [
    "skill_text",
    "noise_text",
    "interval_text",
    "rounded_p",
    "gate_chunk_table",
    "snapshot_skill_table",
    "noise_metadata",
]


def skill_text(value: Any, limit: int = 600) -> str:
    """*value* as table text, cut to *limit* characters (an ellipsis marks the cut)."""
    # Skill text is model-derived and untrusted: the UI renders table cells as plain text; cap the length.
    text = str(value or "")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def noise_text(within_noise: Any) -> str:
    """A chunk's noise verdict in words: within noise, above noise bar, or – when unknown."""
    return "within noise" if within_noise is True else "above noise bar" if within_noise is False else "–"


def interval_text(ci: Any) -> str:
    """A ``[low, high]`` interval as signed text, or – when there is none."""
    return f"[{ci[0]:+.4f}, {ci[1]:+.4f}]" if ci else "–"


def rounded_p(value: Any) -> Any:
    """A number rounded to 4 places for a table cell, or None."""
    return None if value is None else round(float(value), 4)


def _noise_bar(contributions: ChunkContributions | OnlineContributions) -> NoiseBar | None:
    reward = contributions.estimates.get("reward")
    return None if reward is None else reward.noise_bar


def _row_id(row: ChunkContribution | OnlineContribution) -> str:
    return row.chunk_id if isinstance(row, ChunkContribution) else row.intervention_id


def gate_chunk_table(
    contributions: ChunkContributions, chunks: dict[str, dict[str, Any]]
) -> tuple[list[dg.TableRecord], dg.TableSchema]:
    """Gate A's chunks as table rows: the core's β with its interval, the noise bar and verdict per chunk.

    *contributions* is the gate's ``contributions.json`` (``shopsimrl-chunk-contributions-v2``),
    *chunks* the draft's chunks by id (for the label and the text). ``noise`` reads ``within noise``
    where the core marks ``|β| ≤ noise bar`` (docs/statistics.md), ``adjusted_p`` is the core's max-T
    sign-flip p-value; both ``–`` when the gate ran without a noise bar.
    """
    noise_bar = _noise_bar(contributions)
    bar = None if noise_bar is None else noise_bar.noise_bar
    rows = []
    for c in contributions.contributions:
        aux = c.auxiliary_coefficients
        chunk = chunks.get(c.chunk_id, {})
        rows.append(
            dg.TableRecord(
                {
                    "chunk": c.chunk_id,
                    "label": str(chunk.get("source_label")),
                    "status": str(c.status),
                    "rank": c.rank,
                    "text": skill_text(chunk.get("content")),
                    "beta_reward": round(float(c.coefficient), 4),
                    "interval_95": interval_text(c.confidence_interval),
                    "noise_bar": rounded_p(bar),
                    "noise": noise_text(c.within_noise),
                    "adjusted_p": rounded_p(c.adjusted_p_value),
                    "beta_r_strict": round(float(aux.get("r_strict", 0.0)), 4),
                    "beta_r_success": round(float(aux.get("r_success", 0.0)), 4),
                }
            )
        )
    schema = dg.TableSchema(
        columns=[
            dg.TableColumn("chunk", "string"),
            dg.TableColumn("label", "string"),
            dg.TableColumn("status", "string"),
            dg.TableColumn("rank", "int"),
            dg.TableColumn("text", "string", description="the skill text"),
            dg.TableColumn("beta_reward", "float"),
            dg.TableColumn("interval_95", "string", description="task-bootstrap 95% interval of beta_reward"),
            dg.TableColumn("noise_bar", "float", description="largest |beta| no effect produces (sign-flip, 95%)"),
            dg.TableColumn("noise", "string", description="within noise: |beta_reward| <= noise_bar"),
            dg.TableColumn("adjusted_p", "float", description="max-T sign-flip p-value (family-wise)"),
            dg.TableColumn("beta_r_strict", "float"),
            dg.TableColumn("beta_r_success", "float"),
        ]
    )
    return rows, schema


def snapshot_skill_table(
    skills: list[SkillRecord], contributions: ChunkContributions | None
) -> tuple[list[dg.TableRecord], dg.TableSchema]:
    """The frozen bank's skills as table rows, each with its Gate A chunk's noise verdict when known.

    β, interval and rank come from the skill's metadata (what the bank records); ``noise``,
    ``noise_bar`` and ``adjusted_p`` from the gate's *contributions* that selected it (``–`` without).
    """
    by_chunk = {c.chunk_id: c for c in contributions.contributions} if contributions is not None else {}
    noise_bar = None if contributions is None else _noise_bar(contributions)
    bar = None if noise_bar is None else noise_bar.noise_bar
    rows = []
    for skill in skills:
        meta = skill.metadata or {}
        chunk = by_chunk.get(skill.skill_id)
        rows.append(
            dg.TableRecord(
                {
                    "skill": skill.skill_id,
                    "text": skill_text(skill.content),
                    "beta_reward": round(float(meta.get("estimated_effect", 0.0)), 4),
                    "interval_95": interval_text(meta.get("confidence_interval")),
                    "noise_bar": rounded_p(bar) if chunk is not None else None,
                    "noise": noise_text(None if chunk is None else chunk.within_noise),
                    "adjusted_p": rounded_p(None if chunk is None else chunk.adjusted_p_value),
                    "rank": meta.get("contribution_rank"),
                }
            )
        )
    schema = dg.TableSchema(
        columns=[
            dg.TableColumn("skill", "string"),
            dg.TableColumn("text", "string", description="the skill text"),
            dg.TableColumn("beta_reward", "float"),
            dg.TableColumn("interval_95", "string"),
            dg.TableColumn("noise_bar", "float", description="largest |beta| no effect produces (sign-flip, 95%)"),
            dg.TableColumn("noise", "string", description="within noise: |beta_reward| <= noise_bar"),
            dg.TableColumn("adjusted_p", "float", description="max-T sign-flip p-value (family-wise)"),
            dg.TableColumn("rank", "int"),
        ]
    )
    return rows, schema


def noise_metadata(
    contributions: ChunkContributions | OnlineContributions, *, selected_only: bool = False
) -> dict[str, Any]:
    """A gate's selection rule and noise bar as metadata entries, and which selected chunks are within noise.

    ``selection_rule`` is the core's ``estimator.selection_rule``; ``noise_bar`` (and its median,
    ``noise_bar_median_max_abs``) the sign-flip bar of ``estimates.reward``. With *selected_only*
    (the snapshot) the count is over the selected chunks (``skills_within_noise``), otherwise over
    all chunks (``chunks_within_noise``) and the selected ones (``selected_within_noise``);
    ``noise_note`` says it in one sentence and names the noise-level selections. Gate A's and the
    online gate's contributions alike (rows by ``chunk_id`` or ``intervention_id``).
    """
    bar = _noise_bar(contributions)
    rows: list[ChunkContribution] | list[OnlineContribution] = contributions.contributions
    selected = [c for c in rows if c.status == "selected"]
    out: dict[str, Any] = {"selection_rule": str(contributions.estimator.get("selection_rule"))}
    if bar is None:
        out["noise_note"] = "no noise bar: the gate ran without sign-flip samples"
        return out
    # The verdict first, naming the noise-level selections (Gate A chunks, online interventions); the bar's
    # numbers and method after it, so the page shows which selected skills no effect could have produced.
    noisy = [_row_id(c) for c in selected if c.within_noise is True]
    out["noise_note"] = (
        f"{len(noisy)} of {len(selected)} selected chunks within noise ({', '.join(noisy)}: |beta| <= noise bar "
        f"{bar.noise_bar:.4f}): indistinguishable from what no effect produces"
        if noisy
        else f"no selected chunk within noise (noise bar {bar.noise_bar:.4f})"
    )
    if selected_only:
        out["skills_within_noise"] = len(noisy)
    else:
        out["chunks_within_noise"] = sum(c.within_noise is True for c in rows)
        out["selected_within_noise"] = len(noisy)
    out.update(
        {
            "noise_bar": float(bar.noise_bar),
            "noise_bar_median_max_abs": float(bar.median_max_abs),
            "noise_bar_method": dg.MetadataValue.json(bar.to_json()),
        }
    )
    return out

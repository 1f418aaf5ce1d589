"""``shopsimrl view``: a read-only local web app over run directories (Starlette, server-rendered).

Pages (URLs fixed by the cross-team contract): ``/`` runs; ``/run/<rel>`` a run's summary and its
filterable episode table (from the run index, never from all traces); ``/run/<rel>/episode/<id>``
one transcript; ``/run/<rel>/label/<label>`` a failure label's episodes (``labels.parquet``);
``/compare?a=<rel>&b=<rel>[&task=<id>]``; ``/skillbank?path=<rel>[&run=<rel>]``; ``/chart?path=<rel>.png&sha256=<hex>``
a chart PNG pinned by its hash (the Dagster pages show it inline). The run page shows
the summary's intervals with their sampling design, the comparison page the core's paired
differences with their minimum detectable difference (``_statistics``).

Concurrency: every page handler is a plain function, which Starlette runs in its worker threads
(anyio's pool), so a slow page — a run index being built, a folder that does not answer — holds up
only its own request; the event loop just moves bytes. The run list is paginated and reads only the
page's runs (``RunRows``, kept per state of their files); the listing of run folders is rescanned only
when a folder holding runs changed (``ViewerRoots.runs``).

Safety: only run directories under the roots are served (see ``_paths``); every trace text goes
through Jinja2 autoescape; the CSP allows no script; the Host header must be a loopback name
when bound to loopback (DNS rebinding). The only file the viewer may write is the run index
sidecar, and only when no process holds the run directory.

Why one module: the page handlers are closures over one app's roots, templates and index cache;
splitting them apart would thread that state through every handler for no reader's benefit.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from shopsimrl_core._hashing import json_list, json_object
from shopsimrl_core.analysis._metrics import episode_metrics
from shopsimrl_core.documents._base import DocumentError
from shopsimrl_core.documents._skills import SkillBank
from shopsimrl_core.episode import _metrics
from shopsimrl_core.viewer._data import (
    LABELS_MAX_BYTES,
    IndexCache,
    RunRows,
    json_text,
    labels_of,
    number_param,
    page_of,
    read_json,
    read_summary,
    run_meta,
    size_note,
    too_large,
)
from shopsimrl_core.viewer._paths import PathRefused, RunRef, ViewerRoots
from shopsimrl_core.viewer._statistics import ComparisonCache, design_view, gate_view

__all__ = ["create_app", "create_viewer_app", "serve", "RUNS_PER_PAGE", "SORT_COLUMNS"]

SORT_COLUMNS = (
    "episode_id",
    "task_id",
    "reward",
    "n_steps",
    "protocol_errors",
    "invalid_actions",
    "duration_ms",
    "attempts",
)
_TABLE_COLUMNS = [
    "episode",
    "task",
    "sample",
    "status",
    "reward",
    "success",
    "termination / error",
    "category",
    "steps",
    "protocol errors",
    "invalid actions",
    "attempts",
    "duration ms",
    "label",
]
RUNS_PER_PAGE = 100
"""Rows of the run list per page (``/?per=`` chooses 1-500)."""
_COMPARE_LINKS = 20  # "same task in" links on an episode page
_MAX_FLIPS_SHOWN = 1000  # longer lists are counted, and the first 1000 of each listed
_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; "
    "base-uri 'none'; frame-ancestors 'none'"
)


def _href_run(rel: str) -> str:
    return "/run/" + quote(rel, safe="/")


def _href_episode(rel: str, eid: str) -> str:
    return f"{_href_run(rel)}/episode/{quote(eid, safe='')}"


def create_app(roots: list[str | os.PathLike[str]], *, host: str = "127.0.0.1") -> Any:
    """The viewer as an ASGI app serving the run directories under *roots* (read-only).

    Raises:
        FileNotFoundError: a root is not a directory.
    """
    import polars as pl
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.trustedhost import TrustedHostMiddleware
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, Response
    from starlette.routing import Route

    from shopsimrl_core.viewer._templates import environment

    viewer_roots = ViewerRoots(roots)
    templates = environment()
    indexes = IndexCache()
    rows = RunRows(indexes)
    comparisons = ComparisonCache()

    def render(name: str, http_status: int = 200, **context: Any) -> HTMLResponse:
        html = templates.get_template(name).render(**context)
        return HTMLResponse(
            html,
            status_code=http_status,
            headers={
                "Content-Security-Policy": _CSP,
                "X-Content-Type-Options": "nosniff",
                "Referrer-Policy": "no-referrer",
                "Cache-Control": "no-store",
            },
        )

    def refused(message: str, status: int = 404) -> HTMLResponse:
        return render("error", http_status=status, title=f"{status} not served", message=message)

    def run_of(rel: str) -> RunRef:
        return viewer_roots.run(rel)

    def runs_page(request: Request) -> Response:
        params = request.query_params
        query = params.get("q", "").strip()
        listed = viewer_roots.runs()
        if query:
            needle = query.casefold()
            listed = [run for run in listed if needle in run.rel.casefold()]
        per = max(1, min(number_param(params, "per", int) or RUNS_PER_PAGE, 500))
        pages = max(1, math.ceil(len(listed) / per))
        page = min(max(1, number_param(params, "page", int) or 1), pages)
        # Only this page's runs are read (each row kept while its files keep their mtime and size).
        items = [
            {"rel": run.rel, "href": _href_run(run.rel), **rows.row(run)}
            for run in listed[(page - 1) * per : page * per]
        ]

        def page_href(number: int) -> str:
            return "/?" + urlencode({**({"q": query} if query else {}), "per": per, "page": number})

        return render(
            "runs",
            runs=items,
            roots=[str(r) for r in viewer_roots.roots],
            q=query,
            total=len(listed),
            first=(page - 1) * per + 1 if items else 0,
            last=(page - 1) * per + len(items),
            page=page,
            pages=pages,
            per=per,
            prev_href=page_href(page - 1) if page > 1 else None,
            next_href=page_href(page + 1) if page < pages else None,
        )

    def run_page(request: Request, run: RunRef) -> Response:
        params = request.query_params
        index = indexes.get(run.path)
        episodes = index.episodes
        labels = labels_of(run)
        label_choices: list[str] = []
        label_counts: list[tuple[str, int]] = []
        if labels is not None and labels.height:
            outcomes = labels.select("episode_id", "outcome", "labels")
            episodes = episodes.join(outcomes, on="episode_id", how="left")
            counts = labels.group_by("outcome").agg(pl.len().alias("n")).sort("outcome").iter_rows()
            label_counts = [(str(k), int(n)) for k, n in counts]
            label_choices = sorted(
                {str(x) for x in labels.get_column("outcome").to_list()}
                | {str(name) for names in labels.get_column("labels").to_list() for name in (names or [])}
            )
        else:
            episodes = episodes.with_columns(
                pl.lit(None, dtype=pl.Utf8).alias("outcome"), pl.lit(None, dtype=pl.List(pl.Utf8)).alias("labels")
            )
        f: dict[str, Any] = {
            k: params.get(k, "")
            for k in (
                "status",
                "success",
                "reward_min",
                "reward_max",
                "termination",
                "label",
                "category",
                "steps_min",
                "steps_max",
                "protocol",
            )
        }
        # the per-episode metrics this run's index holds (episode/_metrics.py): a column each, sortable
        metric_columns = [x for x in _metrics.EPISODE_METRICS if x.column in episodes.columns]
        sorts = (*SORT_COLUMNS, *(x.column for x in metric_columns))
        f["sort"] = params.get("sort", "episode_id") if params.get("sort") in sorts else "episode_id"
        f["order"] = "desc" if params.get("order") == "desc" else "asc"
        per = number_param(params, "per", int) or 50
        f["per"] = per = max(1, min(per, 500))
        page = max(1, number_param(params, "page", int) or 1)
        cond = []
        if f["status"] in ("completed", "failed"):
            cond.append(pl.col("complete") if f["status"] == "completed" else ~pl.col("complete"))
        if f["success"] == "yes":
            cond.append(pl.col("r_success").fill_null(0.0) >= 1.0)
        elif f["success"] == "no":
            cond.append(pl.col("r_success").fill_null(0.0) < 1.0)
        for key, op in (("reward_min", "ge"), ("reward_max", "le")):
            value = number_param(params, key, float)
            if value is not None:
                cond.append(getattr(pl.col("reward"), op)(value))
        if f["termination"]:
            cond.append((pl.col("termination_reason") == f["termination"]) | (pl.col("error_type") == f["termination"]))
        if f["category"]:
            cond.append(pl.col("category") == f["category"])
        if f["label"]:
            cond.append((pl.col("outcome") == f["label"]) | pl.col("labels").list.contains(f["label"]).fill_null(False))
        for key, op in (("steps_min", "ge"), ("steps_max", "le")):
            value = number_param(params, key, int)
            if value is not None:
                cond.append(getattr(pl.col("n_steps"), op)(value))
        if f["protocol"] == "none":
            cond.append(pl.col("protocol_errors") == 0)
        elif f["protocol"] == "some":
            cond.append(pl.col("protocol_errors") > 0)
        chosen = episodes.filter(pl.all_horizontal(cond)) if cond else episodes
        total = chosen.height
        pages = max(1, math.ceil(total / per))
        page = min(page, pages)
        window = page_of(chosen, f["sort"], f["order"] == "desc", (page - 1) * per, per)
        rows = []
        for row in window.iter_rows(named=True):
            row["href"] = _href_episode(run.rel, row["episode_id"])
            rows.append(row)

        def page_href(number: int) -> str:
            query = {k: v for k, v in params.items() if k != "page" and v != ""}
            query["page"] = str(number)
            return f"{_href_run(run.rel)}?{urlencode(query)}"

        choices = {
            "termination": sorted(
                {str(v) for v in episodes.get_column("termination_reason").drop_nulls().unique().to_list()}
                | {str(v) for v in episodes.get_column("error_type").drop_nulls().unique().to_list()}
            ),
            "category": sorted(str(v) for v in episodes.get_column("category").drop_nulls().unique().to_list()),
            "label": label_choices,
        }
        summary = read_summary(run.path / "summary.json")
        return render(
            "run",
            too_large=too_large(run),
            rel=run.rel,
            run_href=_href_run(run.rel),
            meta=run_meta(run),
            summary=summary,
            design=design_view(summary, index),
            f=f,
            choices=choices,
            sorts=sorts,
            rows=rows,
            total=total,
            n_episodes=index.episodes.height,
            page=page,
            pages=pages,
            prev_href=page_href(page - 1) if page > 1 else None,
            next_href=page_href(page + 1) if page < pages else None,
            columns=_TABLE_COLUMNS,
            metric_columns=metric_columns,
            metrics=episode_metrics(index) if metric_columns else [],
            label_counts=label_counts,
        )

    def episode_page(request: Request, run: RunRef, eid: str) -> Response:
        index = indexes.get(run.path)
        record = index.read_record(eid)
        if not isinstance(record, dict):
            return refused(f"episode {eid!r} is not in run {run.rel!r}")
        conversation = json_list(record.get("conversation"))
        system_prompt = next(
            (m.get("content") for m in conversation if isinstance(m, dict) and m.get("role") == "system"), None
        )
        reset = json_object(record.get("reset"))
        steps = []
        for step in record.get("steps") or []:
            if not isinstance(step, dict):
                continue
            model = json_object(step.get("model"))
            environment_ = json_object(step.get("environment"))
            feedback = (
                environment_.get("action_feedback") if isinstance(environment_.get("action_feedback"), dict) else None
            )
            calls = []
            for call in model.get("tool_calls") or []:
                if isinstance(call, dict):
                    raw = call.get("raw_arguments")
                    calls.append(
                        {
                            "name": call.get("name"),
                            "arguments": raw if isinstance(raw, str) else json_text(call.get("arguments")),
                        }
                    )
            steps.append(
                {
                    "step_index": step.get("step_index"),
                    "observation": str(step.get("observation") or ""),
                    "reasoning": model.get("reasoning"),
                    "content": model.get("content"),
                    "tool_calls": calls,
                    "action": step.get("action"),
                    "feedback": feedback or None,
                    "protocol_error": step.get("protocol_error")
                    if isinstance(step.get("protocol_error"), dict)
                    else None,
                    "protocol_feedback": json_text(step["protocol_feedback"])
                    if step.get("protocol_feedback")
                    else None,
                    "policy_failure": step.get("policy_failure")
                    if isinstance(step.get("policy_failure"), dict)
                    else None,
                    "timing": step.get("timing") if isinstance(step.get("timing"), dict) else None,
                    "usage": model.get("usage") if isinstance(model.get("usage"), dict) else None,
                    "finish_reason": model.get("finish_reason"),
                }
            )
        final = record.get("final") if isinstance(record.get("final"), dict) else None
        detail = final.get("reward_detail") if final and isinstance(final.get("reward_detail"), dict) else {}
        reward_detail = [(k, json_text(v) if isinstance(v, (dict, list)) else v) for k, v in detail.items()]
        job = json_object(record.get("job"))
        provenance = json_object(record.get("provenance"))
        model_identity = json_object(provenance.get("model"))
        compare_links: list[dict[str, str]] = []
        task_id = job.get("task_id")
        if task_id is not None:
            for other in viewer_roots.known_runs():  # links only: a listing being rescanned is not waited for
                if len(compare_links) >= _COMPARE_LINKS:
                    break
                if other.rel != run.rel:
                    compare_links.append(
                        {
                            "rel": other.rel,
                            "href": "/compare?" + urlencode({"a": run.rel, "b": other.rel, "task": task_id}),
                        }
                    )
        persona = reset.get("user_persona")
        return render(
            "episode",
            rel=run.rel,
            run_href=_href_run(run.rel),
            self_href=_href_episode(run.rel, eid),
            eid=eid,
            job=job,
            attempt=record.get("attempt") or {},
            status=record.get("status"),
            complete=index.episode(eid)["complete"],
            checkpoint=model_identity.get("checkpoint_id") or model_identity.get("model"),
            duration_ms=record.get("duration_ms"),
            timing=record.get("timing") if isinstance(record.get("timing"), dict) else None,
            error=record.get("error") if isinstance(record.get("error"), dict) else None,
            system_prompt=system_prompt or "",
            skills=[s for s in record.get("selected_skills") or [] if isinstance(s, dict)],
            persona=json_text(persona) if persona else None,
            task_instruction=reset.get("task_instruction"),
            steps=steps,
            final=final,
            reward_detail=reward_detail,
            purchase=json_text(final.get("purchase")) if final else "",
            goal=json_text(final.get("goal")) if final else "",
            compare_links=compare_links,
        )

    def label_page(request: Request, run: RunRef, label: str) -> Response:
        labels = labels_of(run)
        if labels is None:
            note = size_note(run.path / "labels.parquet", LABELS_MAX_BYTES)
            if note is not None:
                return render("error", title="too large to show", message=f"run {run.rel!r}: {note}")
            return refused(f"run {run.rel!r} has no labels.parquet; materialize episode_labels (or label_run) first")
        hit = labels.filter((pl.col("outcome") == label) | pl.col("labels").list.contains(label).fill_null(False)).sort(
            "episode_id"
        )
        rows = []
        for row in hit.iter_rows(named=True):
            try:
                evidence = json.loads(row.get("evidence_json") or "{}")
            except ValueError:
                evidence = {}
            steps = evidence.get(label) if isinstance(evidence, dict) else None
            rows.append(
                {
                    "episode_id": row["episode_id"],
                    "task_id": row.get("task_id"),
                    "outcome": row.get("outcome"),
                    "labels": row.get("labels") or [],
                    "reward": row.get("reward"),
                    "steps": [s for s in steps if isinstance(s, int)] if isinstance(steps, list) else [],
                    "href": _href_episode(run.rel, row["episode_id"]),
                }
            )
        return render("label", rel=run.rel, run_href=_href_run(run.rel), label=label, rows=rows)

    def run_dispatch(request: Request) -> Response:
        tail = request.path_params["tail"]
        try:
            if "/episode/" in tail:
                rel, _, eid = tail.rpartition("/episode/")
                if "/" not in eid and eid:
                    return episode_page(request, run_of(rel), eid)
            if "/label/" in tail:
                rel, _, label = tail.rpartition("/label/")
                if "/" not in label and label:
                    return label_page(request, run_of(rel), label)
            return run_page(request, run_of(tail))
        except PathRefused as exc:
            return refused(str(exc))

    def round_page(request: Request) -> Response:
        # a training round's folder (training.out_dir): its groups from the triage documents (viewer/_round.py)
        from shopsimrl_core.viewer._round import round_groups

        try:
            run = run_of(request.path_params["tail"])
        except PathRefused as exc:
            return refused(str(exc))
        data = round_groups(run.path)
        for group in data["groups"]:
            for sample in group["members"]:
                sample["href"] = _href_episode(run.rel, sample["episode_id"])
            if group["retry"] is not None:
                group["retry"]["href"] = _href_episode(run.rel, group["retry"]["episode_id"])
        return render("round", rel=run.rel, run_href=_href_run(run.rel), **data)

    def side(run: RunRef) -> dict[str, Any]:
        summary = read_summary(run.path / "summary.json")
        return {
            "rel": run.rel,
            "run_href": _href_run(run.rel),
            **run_meta(run),
            "n": None if summary is None else summary.counts.completed,
            "reward_mean": None if summary is None else summary.primary.reward_mean,
            "success_rate": None if summary is None else summary.primary.success_rate,
        }

    def compare_page(request: Request) -> Response:
        params = request.query_params
        try:
            a, b = run_of(params.get("a", "")), run_of(params.get("b", ""))
        except PathRefused as exc:
            return refused(str(exc))
        task = number_param(params, "task", int)
        if task is not None:
            sides = []
            for run in (a, b):
                index = indexes.get(run.path)
                ids = index.episodes.filter(pl.col("task_id") == task).get_column("episode_id").to_list()
                items = []
                for eid in ids:
                    record = index.read_record(eid) or {}
                    final = json_object(record.get("final"))
                    steps = []
                    for step in record.get("steps") or []:
                        if not isinstance(step, dict):
                            continue
                        env = json_object(step.get("environment"))
                        fb = json_object(env.get("action_feedback"))
                        model = json_object(step.get("model"))
                        pe = step.get("protocol_error") if isinstance(step.get("protocol_error"), dict) else None
                        steps.append(
                            {
                                "action": step.get("action"),
                                "protocol_error": pe.get("code") if pe else None,
                                "feedback": fb.get("message") or fb.get("reason"),
                                "valid": fb.get("valid"),
                                "reasoning": model.get("reasoning"),
                            }
                        )
                    items.append(
                        {
                            "eid": eid,
                            "href": _href_episode(run.rel, eid),
                            "reward": final.get("reward"),
                            "termination": final.get("termination_reason"),
                            "status": record.get("status"),
                            "steps": steps,
                        }
                    )
                sides.append({**side(run), "episodes": items})
            return render(
                "compare_task",
                a=sides[0],
                b=sides[1],
                task=task,
                checkpoint_href="/compare?" + urlencode({"a": a.rel, "b": b.rel}),
            )
        cols = ["episode_id", "task_id", "sample_id", "split", "r_success", "reward", "complete"]
        index_a, index_b = indexes.get(a.path), indexes.get(b.path)
        fa = index_a.episodes.select(cols)
        fb = index_b.episodes.select(cols)
        stats = comparisons.get(
            a,
            b,
            a_checkpoint=run_meta(a).get("checkpoint"),
            b_checkpoint=run_meta(b).get("checkpoint"),
            episodes=max(index_a.episodes.height, index_b.episodes.height),
        )
        paired = fa.join(fb, on=["split", "task_id", "sample_id"], how="inner", suffix="_b").with_columns(
            (pl.col("complete") & (pl.col("r_success").fill_null(0.0) >= 1.0)).alias("sa"),
            (pl.col("complete_b") & (pl.col("r_success_b").fill_null(0.0) >= 1.0)).alias("sb"),
        )
        both = int(paired.filter(pl.col("sa") & pl.col("sb")).height)
        neither = int(paired.filter(~pl.col("sa") & ~pl.col("sb")).height)
        flips = paired.filter(pl.col("sa") != pl.col("sb")).sort("task_id", "sample_id")
        gained: list[dict[str, Any]] = []
        lost: list[dict[str, Any]] = []
        counts = {"gained": int(flips.filter(pl.col("sb")).height), "lost": int(flips.filter(pl.col("sa")).height)}
        for row in flips.iter_rows(named=True):
            target = gained if row["sb"] else lost
            if len(target) >= _MAX_FLIPS_SHOWN:
                continue
            target.append(
                {
                    "task_id": row["task_id"],
                    "sample_id": row["sample_id"],
                    "eid": row["episode_id"],
                    "a_href": _href_episode(a.rel, row["episode_id"]),
                    "b_href": _href_episode(b.rel, row["episode_id_b"]),
                    "a_reward": row["reward"],
                    "b_reward": row["reward_b"],
                    "task_href": "/compare?" + urlencode({"a": a.rel, "b": b.rel, "task": row["task_id"]}),
                }
            )
        return render(
            "compare",
            a=side(a),
            b=side(b),
            paired=paired.height,
            gained=gained,
            lost=lost,
            both=both,
            neither=neither,
            counts=counts,
            shown_max=_MAX_FLIPS_SHOWN,
            stats=stats,
        )

    def skillbank_page(request: Request) -> Response:
        params = request.query_params
        try:
            path = viewer_roots.file(params.get("path", ""), ".json")
            run = run_of(params["run"]) if params.get("run") else None
        except PathRefused as exc:
            return refused(str(exc))
        note = size_note(path)
        if note is not None:
            return render("error", title="too large to show", message=f"{params.get('path')!r}: {note}")
        raw = read_json(path)
        if not isinstance(raw, dict) or not isinstance(raw.get("skills"), list):
            return refused(f"{params.get('path')!r} is not a SkillBank (no skills list)", status=400)
        try:
            bank = SkillBank.parse(raw, str(params.get("path")))
        except DocumentError as exc:
            return refused(f"not a valid SkillBank: {exc}", status=400)
        evidence_by_id: dict[str, list[dict[str, Any]]] = {}
        for sibling in sorted(path.parent.glob("*candidates*.json")):
            if not viewer_roots.inside(sibling):  # a link out of the roots is not read
                continue
            doc = read_json(sibling)
            for cand in (doc or {}).get("candidates", []) if isinstance(doc, dict) else []:
                if isinstance(cand, dict) and isinstance(cand.get("evidence"), list):
                    evidence_by_id.setdefault(str(cand.get("candidate_id")), []).extend(
                        e for e in cand["evidence"] if isinstance(e, dict)
                    )
        gate = gate_view(path, bank, viewer_roots.roots)
        skills = []
        for skill in bank.skills:
            metadata = skill.metadata or {}
            ci = metadata.get("confidence_interval")
            refs = (
                [e for e in metadata.get("evidence", []) if isinstance(e, dict)]
                if isinstance(metadata.get("evidence"), list)
                else []
            )
            refs += evidence_by_id.get(skill.skill_id, [])
            evidence = []
            for ref in refs:
                eid = ref.get("episode_id")
                if not isinstance(eid, str):
                    continue
                href = (
                    _href_episode(run.rel, eid)
                    + (f"#step-{ref['step_index']}" if isinstance(ref.get("step_index"), int) else "")
                    if run
                    else None
                )
                evidence.append(
                    {
                        "episode_id": eid,
                        "step_index": ref.get("step_index"),
                        "role": ref.get("role"),
                        "label": ref.get("label"),
                        "href": href,
                    }
                )
            skills.append(
                {
                    "skill_id": skill.skill_id,
                    "version": skill.version,
                    "enabled": skill.enabled is not False,
                    "content": skill.content,
                    "metadata": json_text(metadata),
                    "evidence": evidence,
                    "clusters": [str(c) for c in metadata.get("evidence_cluster_ids", []) or []],
                    "effect": metadata.get("estimated_effect"),
                    "low": ci[0] if isinstance(ci, list) and len(ci) == 2 else None,
                    "high": ci[1] if isinstance(ci, list) and len(ci) == 2 else None,
                    "noise": (gate or {}).get("chunks", {}).get(skill.skill_id),
                }
            )
        return render(
            "skillbank",
            path=params.get("path"),
            bank_version=bank.bank_version,
            skills=skills,
            gate=gate,
            run_rel=run.rel if run else None,
            run_href=_href_run(run.rel) if run else None,
        )

    def chart_image(request: Request) -> Response:
        """A PNG chart under the roots, for the Dagster pages to show inline (``<img>`` across origins).

        ``sha256`` (at least 12 hex digits) pins the content: a chart redrawn since is refused (404), so
        an older materialization never shows a newer chart as its own.
        """
        params = request.query_params
        try:
            path = viewer_roots.file(params.get("path", ""), ".png")
        except PathRefused as exc:
            return refused(str(exc))
        pinned = params.get("sha256", "").lower()
        if len(pinned) < 12 or any(c not in "0123456789abcdef" for c in pinned):
            return refused("a chart is served with its sha256 (at least 12 hex digits)", status=400)
        if size_note(path) is not None:
            return refused(str(size_note(path)))
        data = path.read_bytes()
        if not hashlib.sha256(data).hexdigest().startswith(pinned):
            return refused(f"{params.get('path')!r} has been redrawn since this link was made")
        return Response(
            data,
            media_type="image/png",
            headers={"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store", "Content-Security-Policy": _CSP},
        )

    loopback = host in ("127.0.0.1", "localhost", "::1")
    middleware = (
        [Middleware(TrustedHostMiddleware, allowed_hosts=["127.0.0.1", "localhost", "[::1]", "::1", "testserver"])]
        if loopback
        else []
    )
    return Starlette(
        routes=[
            Route("/", runs_page),
            Route("/run/{tail:path}", run_dispatch),
            Route("/round/{tail:path}", round_page),
            Route("/compare", compare_page),
            Route("/skillbank", skillbank_page),
            Route("/chart", chart_image),
        ],
        middleware=middleware,
    )


create_viewer_app = create_app
"""The top-level name of :func:`create_app` (``shopsimrl_core.create_viewer_app``)."""


def serve(
    roots: list[str | os.PathLike[str]],
    *,
    host: str = "127.0.0.1",
    port: int = 3300,
    announce: Callable[[str], None] | None = None,
) -> None:
    """Serve the viewer with uvicorn until interrupted (binds 127.0.0.1 unless told otherwise).

    The socket is bound before serving, so *port* 0 takes a free port; *announce* is called with the
    URL actually bound (``http://127.0.0.1:<port>/``) once the socket listens, before the first request.
    Pages are answered concurrently: every handler runs in the server's worker threads.

    Raises:
        ShopSimRLError: ``view-port-unavailable`` when *host*:*port* cannot be bound.
    """
    import socket

    import uvicorn

    from shopsimrl_core._errors import ShopSimRLError

    app = create_app(roots, host=host)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.create_server((host, port), family=family)
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise ShopSimRLError(
            f"--host {host} --port {port}: cannot listen there ({reason}); pass a free port (--port 0 takes "
            "any free one) and an address of this machine as --host (default 127.0.0.1)",
            code="view-port-unavailable",
        ) from exc
    bound = sock.getsockname()[1]
    if announce is not None:
        announce(f"http://{'[' + host + ']' if ':' in host else host}:{bound}/")
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()


def register_view_cli(sub: Any) -> None:
    """Register ``shopsimrl view [ROOT…] [--host H] [--port P]`` on the CLI's sub-parsers."""
    v = sub.add_parser(
        "view", help="browse runs, episodes, comparisons, labels and SkillBanks in a local web app (read-only)"
    )
    v.add_argument("roots", nargs="*", default=["runs"], help="runs roots or run directories (default: runs)")
    v.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1: this machine only)")
    v.add_argument("--port", type=int, default=3300, help="port (default 3300; 0 takes a free one and prints it)")
    v.set_defaults(handler=_cmd_view)


def _cmd_view(args: Any) -> int:
    from shopsimrl_core._errors import ShopSimRLError

    for raw in args.roots:
        if not Path(raw).is_dir():
            raise ShopSimRLError(
                f"{raw}: not a directory; pass a runs root (e.g. runs/) or a run directory", code="view-root-missing"
            )
    if not 0 <= args.port <= 65535:
        raise ShopSimRLError(f"--port {args.port}: not a TCP port; pass 0-65535 (default 3300)", code="usage")

    def announce(url: str) -> None:  # after binding: with --port 0 the line names the port taken
        print(f"shopsimrl view: {url} serving {', '.join(args.roots)} (Ctrl-C stops)", flush=True)

    serve(list(args.roots), host=args.host, port=args.port, announce=announce)
    return 0

"""What the viewer shows of the core's statistics (docs/statistics.md): intervals, design, power.

Nothing here computes a statistic. The run page reads ``summary.json`` (``primary`` with its
intervals and ``sampling_design``) and its per-category rows through the core's
``category_intervals`` (a one-repeat summary keeps the published rows of three keys: their intervals
are computed there, once per state of the run, and cached); the checkpoint comparison page reads
the core's comparison document of the two runs when one is stored next to run B (what the Dagster
``checkpoint_comparison`` asset or ``shopsimrl compare --output`` wrote), and otherwise asks the
core's ``compare_runs`` for it, in memory (the viewer writes nothing), for runs of a bounded size.
The SkillBank page reads the ``contributions.json`` of the gate (Gate A or an online gate) that
selected the bank (same ``assignment_sha256``) for the rule in use and each chunk's noise verdict.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from shopsimrl_core._hashing import json_object
from shopsimrl_core.documents._comparisons import CheckpointComparison
from shopsimrl_core.documents._runs import CategoryRow, EvalSummary, SamplingDesign
from shopsimrl_core.documents._skills import ChunkContributions, OnlineContribution, OnlineContributions, SkillBank
from shopsimrl_core.viewer._paths import RunRef

__all__ = ["design_view", "gate_view", "ComparisonCache", "LIVE_COMPARISON_MAX_EPISODES"]

LIVE_COMPARISON_MAX_EPISODES = 20_000
"""Runs larger than this are compared only through a stored comparison document (a page stays fast)."""
_MAX_STORED = 50  # comparison documents looked at in run B's directory
_MAX_GATES = 200  # Gate A contributions documents looked at under the roots for one SkillBank


def _repeats(design: SamplingDesign | None) -> str | None:
    if design is None or design.repeats_min is None or design.repeats_max is None:
        return None
    low, high = design.repeats_min, design.repeats_max
    return str(low) if low == high else f"{low}–{high}"


def design_view(summary: EvalSummary | None, run_index: Any = None) -> dict[str, Any] | None:
    """The run page's intervals and sampling design, from the run's summary (None without one).

    ``clustered`` runs (``primary.sampling_design`` present: some task has several episodes) show
    tasks × repeats, each interval's method and the design effects; one-repeat runs show their
    episodes as the sampling units. ``categories`` are the breakdown's rows with their intervals,
    tasks and ``small_n`` flag: the core's ``category_intervals`` of the summary and *run_index* (the
    page's opened ``RunIndex``; without one, rows show only what the summary holds).
    """
    if summary is None:
        return None
    primary, counts = summary.primary, summary.counts
    design = primary.sampling_design
    effects = design.design_effect if design is not None else {}
    repeats = _repeats(design)
    rows = []
    for label, value, ci, metric in (
        ("success rate", primary.success_rate, primary.success_ci, "success"),
        ("reward mean", primary.reward_mean, primary.reward_ci, "reward"),
    ):
        if design is not None:
            units = f"{ci.tasks if ci is not None and ci.tasks is not None else design.tasks} tasks × {repeats or '?'}"
        elif ci is not None and ci.n is not None:
            units = f"{ci.n} episodes"
        else:
            units = f"{counts.completed} episodes"
        rows.append(
            {
                "metric": label,
                "estimate": value,
                "low": None if ci is None else ci.low,
                "high": None if ci is None else ci.high,
                "method": None if ci is None else ci.method,
                "level": None if ci is None else ci.confidence_level,
                "units": units,
                "design_effect": effects.get(metric) if design is not None else None,
                "design_effect_used": None if ci is None else ci.design_effect,
                "effective_n": None if ci is None else ci.effective_n,
            }
        )
    categories = []
    for name, row in sorted(_CATEGORIES.rows(summary, run_index).items()):
        success_ci, reward_ci = row.success_ci, row.reward_ci
        categories.append(
            {
                "name": name,
                "tasks": row.tasks,
                "episodes": row.episodes,
                "success": row.success_rate,
                "success_low": None if success_ci is None else success_ci.low,
                "success_high": None if success_ci is None else success_ci.high,
                "reward": row.reward_mean,
                "reward_low": None if reward_ci is None else reward_ci.low,
                "reward_high": None if reward_ci is None else reward_ci.high,
                "small_n": row.small_n is True,
                "methods": " / ".join(ci.method for ci in (success_ci, reward_ci) if ci is not None and ci.method),
            }
        )
    return {
        "clustered": design is not None,
        "tasks": None if design is None else design.tasks,
        "episodes": counts.completed if design is None else design.episodes,
        "repeats": repeats,
        "design_effect": effects,
        "reward_sem_cluster": None if design is None else design.reward_sem,
        "rows": rows,
        "categories": categories,
    }


class _CategoryRows:
    """The core's ``category_intervals`` per state of a run and its summary, computed once for every page.

    A one-repeat run's category intervals are bootstraps computed where shown; the run page is
    rendered for every filter and page of its table, so they are kept while neither ``traces.jsonl``
    (the index's covered bytes) nor the summary's category rows change.
    """

    _MAX = 64  # runs kept; the oldest entry goes first

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[Path, tuple[Any, dict[str, CategoryRow]]] = {}

    def rows(self, summary: EvalSummary, run_index: Any) -> dict[str, CategoryRow]:
        from shopsimrl_core.analysis import category_intervals

        breakdown = summary.breakdowns.category if summary.breakdowns is not None else {}
        if run_index is None or not breakdown:
            return breakdown
        shown = {name: row.to_json() for name, row in breakdown.items()}
        key = (getattr(run_index, "covered_bytes", None), json.dumps(shown, sort_keys=True))
        path = Path(run_index.run_dir)
        with self._lock:
            hit = self._items.get(path)
            if hit is not None and hit[0] == key:
                return hit[1]
        rows = category_intervals(summary, run_index)
        with self._lock:
            self._items.pop(path, None)
            while len(self._items) >= self._MAX:
                self._items.pop(next(iter(self._items)))
            self._items[path] = (key, rows)
        return rows


_CATEGORIES = _CategoryRows()


def _metric_rows(doc: CheckpointComparison) -> list[dict[str, Any]]:
    """The comparison's metrics, ``reward`` and ``r_success`` first, each with its power fields."""
    metrics = doc.paired.metrics
    order = [m for m in ("reward", "r_success") if m in metrics] + sorted(
        m for m in metrics if m not in ("reward", "r_success")
    )
    rows = []
    for name in order:
        values = metrics[name]
        ci = values.confidence_interval
        components = values.variance_components
        rows.append(
            {
                "metric": name,
                "a_mean": values.a_mean,
                "b_mean": values.b_mean,
                "delta": values.mean_difference,
                "low": ci[0] if ci is not None and len(ci) == 2 else None,
                "high": ci[1] if ci is not None and len(ci) == 2 else None,
                "sd_difference": values.sd_difference,
                "mde": values.minimum_detectable_difference,
                "within_noise": values.within_noise,
                "between_task": None if components is None else components.between_task,
                "within_task": None if components is None else components.within_task,
                "repeats": None if components is None else components.repeats,
                "headline": name in ("reward", "r_success"),
            }
        )
    return rows


def _view(doc: CheckpointComparison, source: str) -> dict[str, Any]:
    paired, alignment = doc.paired, doc.alignment
    return {
        "source": source,
        "created_at": doc.created_at,
        "pairs": paired.pairs,
        "paired_episodes": alignment.paired_episodes,
        "differences": list(alignment.differences),
        "power": paired.power or {},
        "bootstrap": paired.bootstrap,
        "metrics": _metric_rows(doc),
        "error": None,
    }


def _same(stored: Any, path: Path) -> bool:
    try:
        return isinstance(stored, str) and Path(stored).resolve() == path.resolve()
    except OSError:
        return False


def _stored(a: RunRef, b: RunRef, a_checkpoint: Any, b_checkpoint: Any) -> tuple[CheckpointComparison, Path] | None:
    """A comparison document of exactly A → B in run B's directory, with the file it came from.

    Its recorded run paths are these two runs, or (a folder moved since) its checkpoints are theirs
    and its name is ``comparison_vs_<A>.json``.
    """
    from shopsimrl_core.documents import DocumentError
    from shopsimrl_core.viewer._data import read_json

    fallback = None
    for path in sorted(b.path.glob("comparison*.json"))[:_MAX_STORED]:
        raw = read_json(path)
        if not isinstance(raw, dict):
            continue
        try:
            doc = CheckpointComparison.parse(raw, str(path))
        except DocumentError:
            continue
        runs, models = doc.runs, doc.models
        if _same(runs.get("a"), a.path) and _same(runs.get("b"), b.path):
            return doc, path
        if (
            path.name == f"comparison_vs_{a_checkpoint}.json"
            and json_object(models.get("a")).get("checkpoint_id") == a_checkpoint
            and json_object(models.get("b")).get("checkpoint_id") == b_checkpoint
        ):
            fallback = (doc, path)
    return fallback


class ComparisonCache:
    """The paired statistics of run pairs, from a stored document or computed once per state of both runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[tuple[Path, Path], tuple[Any, dict[str, Any]]] = {}

    def get(self, a: RunRef, b: RunRef, *, a_checkpoint: Any, b_checkpoint: Any, episodes: int) -> dict[str, Any]:
        """The comparison view of A → B (``error`` set, and nothing else, when there is none to show).

        *episodes* is the larger of the two runs' episode counts: above
        ``LIVE_COMPARISON_MAX_EPISODES`` only a stored document is shown.
        """
        stored = _stored(a, b, a_checkpoint, b_checkpoint)
        if stored is not None:
            doc, path = stored
            return _view(doc, f"{b.rel}/{path.name}")
        if episodes > LIVE_COMPARISON_MAX_EPISODES:
            return {
                "error": f"no comparison document of these runs in {b.rel}, and they are too large "
                f"({episodes} episodes) to compare for a page; write one with: shopsimrl compare "
                f"<runs>/{a.rel} <runs>/{b.rel} --output <runs>/{b.rel}/comparison_vs_{a_checkpoint}.json"
            }
        from shopsimrl_core.viewer._data import size_note

        # compare_runs reads both manifests whole: one far larger than its episodes warrant is not read.
        note = next(filter(None, (size_note(p / "manifest.json") for p in (a.path, b.path))), None)
        if note is not None:
            return {"error": f"no paired statistics: {note}"}
        key = (a.path, b.path)
        state = tuple(_stamp(p / "traces.jsonl") for p in (a.path, b.path))
        with self._lock:
            hit = self._items.get(key)
            if hit is not None and hit[0] == state:
                return hit[1]
        view = _computed(a, b)
        with self._lock:
            self._items[key] = (state, view)
        return view


def _stamp(path: Path) -> tuple[int, int]:
    try:
        stat = path.stat()
    except OSError:
        return (0, 0)
    return (stat.st_size, stat.st_mtime_ns)


def _computed(a: RunRef, b: RunRef) -> dict[str, Any]:
    """``compare_runs`` of the two runs with the core's defaults (those of ``shopsimrl compare``), in memory.

    Not strict: runs whose plans differ (another step limit, other skills) are still paired here, as
    the page's gained and lost tasks are; the differing fields are shown above the numbers.
    """
    from shopsimrl_core._errors import ShopSimRLError
    from shopsimrl_core.analysis._comparison import compare_runs

    try:
        doc = compare_runs(a.path, b.path, strict=False)
    except ShopSimRLError as exc:
        return {"error": f"no paired statistics: {exc.one_line()}"}
    view = _view(doc, "computed for this page (shopsimrl compare defaults; not stored)")
    view["created_at"] = None  # now: not worth a timestamp
    return view


def _gate_rows(doc: ChunkContributions | OnlineContributions) -> dict[str, dict[str, Any]]:
    """Each contribution row's verdict, keyed by the bank's ``skill_id`` where the row became a skill.

    Gate A rows are chunks (``chunk_id``); online rows are interventions, and a selected one becomes the
    skill of its ``logical_chunk_id`` (a winning rewrite keeps its target's id).
    """
    chunks: dict[str, dict[str, Any]] = {}
    for c in doc.contributions:
        verdict = {"within_noise": c.within_noise, "adjusted_p": c.adjusted_p_value, "status": c.status}
        if isinstance(c, OnlineContribution):
            if c.status == "selected":
                chunks[c.logical_chunk_id] = verdict
            chunks.setdefault(c.intervention_id, verdict)
        else:
            chunks[c.chunk_id] = verdict
    return chunks


def gate_view(bank_path: Path, bank: SkillBank, roots: list[Path]) -> dict[str, Any] | None:
    """The gate run that selected *bank* (Gate A or an online gate): rule in use, noise bar, each chunk's verdict.

    The bank records its gate's ``assignment_sha256``; the ``contributions.json`` with the same one is
    looked for next to the bank and in its ``online_gate/``, then in ``gate-a/*/`` and
    ``rounds/*/online_gate/`` of each root (where the pipeline keeps Gate A runs and training rounds; a
    snapshot under ``skillbanks/`` finds its gate there). ``gate`` names the kind (``Gate A``, or
    ``online gate`` for a bank with a ``pool_sha256``). None for a bank no gate selected; ``chunks`` is
    empty when the gate's document is not under the roots.
    """
    from shopsimrl_core.documents import DocumentError
    from shopsimrl_core.viewer._data import read_json

    metadata = bank.metadata or {}
    assignment = metadata.get("assignment_sha256")
    estimator = json_object(metadata.get("estimator"))
    if not isinstance(assignment, str):
        return None
    online = isinstance(metadata.get("pool_sha256"), str)
    model: type[ChunkContributions] | type[OnlineContributions] = OnlineContributions if online else ChunkContributions
    view: dict[str, Any] = {"gate": "online gate" if online else "Gate A",
                            "selection_rule": estimator.get("selection_rule"), "noise_bar": None,
                            "source": None, "chunks": {}}
    candidates = [bank_path.parent / "contributions.json", bank_path.parent / "online_gate" / "contributions.json"]
    for root in roots:
        pattern = "rounds/*/online_gate/contributions.json" if online else "gate-a/*/contributions.json"
        candidates += sorted(root.glob(pattern))[:_MAX_GATES]
    for path in candidates:
        try:
            real = path.resolve(strict=True)
        except OSError:
            continue
        inside = next((r for r in roots if r in real.parents), None)
        if inside is None:  # a symlink out of the roots is not read
            continue
        raw = read_json(real)
        if not isinstance(raw, dict) or raw.get("assignment_sha256") != assignment:
            continue
        try:
            doc = model.parse(raw, str(path))
        except DocumentError:
            continue
        reward = doc.estimates.get("reward")
        bar = None if reward is None else reward.noise_bar
        view.update(
            source=real.relative_to(inside).as_posix(),
            selection_rule=doc.estimator.get("selection_rule", view["selection_rule"]),
            noise_bar=None if bar is None else bar.noise_bar,
            chunks=_gate_rows(doc),
        )
        break
    return view

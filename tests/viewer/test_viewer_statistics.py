"""The run page's intervals and sampling design, the comparison page's paired statistics (issue 23).

Runs are written with the test kit's records and summarized by the core; every number the pages
show is checked against the core document it comes from (``summary.json``, ``compare_runs``).
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import httpx
from testkit.core_runkit import record

import shopsimrl_core as core
from shopsimrl_core.documents import ChunkContributions, OnlineContributions


def _run(
    root: Path, name: str, *, tasks: int, repeats: int, shift: float = 0.0, categories: tuple[str, ...] = tuple("ABC")
) -> Path:
    """A val run whose tasks differ more than their repeats (design effect > 1).

    *shift* adds 0.5 to 1.25 times its value of reward on every task and turns task 1 into a success:
    a reward difference a comparison detects, and a success difference within its noise.
    """
    run = root / "val" / name
    store = core.RunStore(run)
    for task in range(tasks):
        for sample in range(repeats):
            reward = round(min(1.0, 0.1 + 0.06 * (task % 6) + 0.03 * sample + shift * (0.5 + (task % 4) / 4)), 4)
            success = int(task % 3 == 0 or (shift > 0 and task == 1))
            store.append(record(task, sample, reward=reward, r_success=success,
                                category=categories[task % len(categories)]))
    core.summarize_run(run)
    return run


def _text(page: str, ident: str) -> str:
    """The text of the element with id *ident* (tags dropped, entities decoded, spaces collapsed)."""
    start = page.index(">", page.index(f'id="{ident}"')) + 1
    end = page.index("</table>", start) if page[:start].rstrip().endswith("<table") else page.index("</p>", start)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page[start:end]))).strip()


def _get(base: str, url: str, **params: str) -> str:
    response = httpx.get(base + url, params=params, timeout=60, trust_env=False)
    assert response.status_code == 200, response.text
    return response.text


def test_run_page_shows_the_design_its_intervals_follow(tmp_path: Path, viewer_for) -> None:
    clustered = _run(tmp_path, "repeats", tasks=12, repeats=3)
    single = _run(tmp_path, "single", tasks=14, repeats=1)
    base = viewer_for([tmp_path]).base_url

    page = _get(base, "/run/val/repeats")
    primary = json.loads((clustered / "summary.json").read_text())["primary"]
    design, success = primary["sampling_design"], primary["success_ci"]
    effects = design["design_effect"]
    assert effects["reward"] > 1.5
    assert _text(page, "design").startswith(
        f"Sampling unit: task · 12 tasks × 3 (36 episodes): the intervals resample tasks, keeping each task's "
        f"repeats together · design effect success {effects['success']:.2f}, reward {effects['reward']:.2f}"
    )
    intervals = _text(page, "intervals")
    assert (
        f"success rate {primary['success_rate']:.3f} [{success['low']:.3f}, {success['high']:.3f}] "
        f"wilson_design_effect 12 tasks × 3 {effects['success']:.2f}"
    ) in intervals
    reward = primary["reward_ci"]
    assert (
        f"reward mean {primary['reward_mean']:.3f} [{reward['low']:.3f}, {reward['high']:.3f}] "
        f"task_cluster_percentile_bootstrap 12 tasks × 3 {effects['reward']:.2f}"
    ) in intervals
    categories = json.loads((clustered / "summary.json").read_text())["breakdowns"]["category"]
    row = categories["A"]
    assert (
        f"A {row['tasks']} {row['episodes']} {row['success_rate']:.3f} "
        f"[{row['success_ci']['low']:.3f}, {row['success_ci']['high']:.3f}]"
    ) in _text(page, "categories")
    assert page.count('class="tag bad small-n"') == sum(r["small_n"] for r in categories.values()) == 3

    page = _get(base, "/run/val/single")
    primary = json.loads((single / "summary.json").read_text())["primary"]
    assert _text(page, "design") == "One episode per task: the 14 episodes are the sampling units."
    success = primary["success_ci"]
    assert (
        f"success rate {primary['success_rate']:.3f} [{success['low']:.3f}, {success['high']:.3f}] wilson 14 episodes"
    ) in _text(page, "intervals")
    # summary.json keeps the published category rows; the page shows the core's category_intervals
    summary = json.loads((single / "summary.json").read_text())
    assert "small_n" not in summary["breakdowns"]["category"]["A"]
    row = core.category_intervals(core.EvalSummary.parse(summary, "summary.json"), single)["A"]
    assert row.success_ci is not None and row.reward_ci is not None and row.success_rate is not None
    assert row.reward_mean is not None
    assert (
        f"A {row.tasks} {row.episodes} {row.success_rate:.3f} "
        f"[{row.success_ci.low:.3f}, {row.success_ci.high:.3f}] {row.reward_mean:.3f} "
        f"[{row.reward_ci.low:.3f}, {row.reward_ci.high:.3f}] wilson / percentile_bootstrap small n"
    ) in _text(page, "categories")


def test_comparison_page_shows_the_detectable_difference_and_within_noise(tmp_path: Path, viewer_for) -> None:
    a = _run(tmp_path, "ckpt-a", tasks=12, repeats=3)
    b = _run(tmp_path, "ckpt-b", tasks=12, repeats=3, shift=0.25)
    base = viewer_for([tmp_path]).base_url

    # No comparison document next to B: the core computes one for the page, with its defaults.
    page = _get(base, "/compare", a="val/ckpt-a", b="val/ckpt-b")
    assert "computed for this page" in _text(page, "comparison-source")
    doc = core.compare_runs(a, b)
    metrics = doc.paired.metrics
    reward, success = metrics["reward"], metrics["r_success"]
    assert reward.within_noise is False and success.within_noise is True
    table = _text(page, "paired-metrics")
    assert reward.confidence_interval is not None and reward.sd_difference is not None
    assert reward.minimum_detectable_difference is not None and success.minimum_detectable_difference is not None
    low, high = reward.confidence_interval
    assert (
        f"reward {reward.a_mean:.3f} {reward.b_mean:.3f} {reward.mean_difference:+.3f} "
        f"[{low:+.3f}, {high:+.3f}] {reward.sd_difference:.3f} {reward.minimum_detectable_difference:.3f} "
        "detected : the interval excludes 0"
    ) in table
    assert (
        f"{success.minimum_detectable_difference:.3f} within noise : |Δ| {abs(success.mean_difference):.3f} "
        f"< MDE {success.minimum_detectable_difference:.3f}"
    ) in table
    components = success.variance_components
    assert components is not None and components.between_task is not None and components.within_task is not None
    assert f"{components.between_task:.4g} / {components.within_task:.4g} (3 repeats)" in table

    # A stored document of these two runs (as checkpoint_comparison writes it) is what the page shows.
    stored = core.compare_runs(a, b, bootstrap_samples=200, bootstrap_seed=7)
    core.write_json_atomic(b / "comparison_vs_ckpt-a.json", stored.to_json())
    page = _get(base, "/compare", a="val/ckpt-a", b="val/ckpt-b")
    assert _text(page, "comparison-source").startswith(
        "12 paired tasks (36 episodes) · val/ckpt-b/comparison_vs_ckpt-a.json · "
    )
    stored_ci = stored.paired.metrics["reward"].confidence_interval
    assert stored_ci is not None
    low, high = stored_ci
    assert (low, high) != tuple(reward.confidence_interval)
    assert f"[{low:+.3f}, {high:+.3f}]" in _text(page, "paired-metrics")
    # ... but not for the reverse direction.
    reverse = _get(base, "/compare", a="val/ckpt-b", b="val/ckpt-a")
    assert "computed for this page" in _text(reverse, "comparison-source")


def test_statistics_text_from_the_files_is_escaped(tmp_path: Path, viewer_for) -> None:
    hostile = '<img src=x onerror="alert(1)">'
    _run(tmp_path, "a", tasks=4, repeats=2, categories=(hostile,))
    run = _run(tmp_path, "b", tasks=4, repeats=2, categories=(hostile,), shift=0.1)
    stored = core.compare_runs(tmp_path / "val" / "a", run, bootstrap_samples=50).to_json()
    stored["paired"]["metrics"][hostile] = stored["paired"]["metrics"]["steps"]
    stored["paired"]["power"]["method"] = hostile
    core.write_json_atomic(run / "comparison_vs_a.json", stored)
    base = viewer_for([tmp_path]).base_url
    for page in (_get(base, "/run/val/b"), _get(base, "/compare", a="val/a", b="val/b")):
        assert hostile not in page and "&lt;img src=x onerror=" in page


def test_skillbank_page_marks_the_chunks_within_noise(tmp_path: Path, viewer_for) -> None:
    """A bank frozen from Gate A (published rule) shows each skill's β and the gate's noise verdict."""
    from testkit.gatekit import EffectRunner, gate_setup

    inputs = tmp_path / "inputs"
    inputs.mkdir()
    bare_cfg, bare_run, draft_path = gate_setup(inputs)
    root = tmp_path / "runs"
    runner = EffectRunner({"chunk-000000000000": 0.3, "chunk-000000000001": -0.2, "chunk-000000000002": 0.05})
    result = core.run_gate_a(
        core.GateAConfig(output_dir=root / "gate-a" / "ckpt-a", experiment_config=bare_cfg, bare_run_dir=bare_run,
                         draft_path=draft_path, bootstrap_samples=50),
        runner=runner,
    )
    assert result.selected_skillbank_path is not None and result.contributions is not None
    snap = core.snapshot_skillbank(core.load_skillbank(result.selected_skillbank_path), root / "skillbanks")
    assert isinstance(result.contributions, ChunkContributions)
    noise_bar = result.contributions.estimates["reward"].noise_bar
    assert noise_bar is not None
    bar = noise_bar.noise_bar
    rows = {c.chunk_id: c for c in result.contributions.contributions}
    _run(root, "ckpt-a", tasks=2, repeats=1)  # the root holds a run, as a runs root does
    base = viewer_for([root]).base_url

    page = _get(base, "/skillbank", path=snap.path.relative_to(root).as_posix())
    assert _text(page, "gate") == (
        f"Gate A selection rule strictly_positive_top_k · sign-flip noise bar {bar:.4f} (the largest |β| no effect "
        "produces, 95%) · from gate-a/ckpt-a/contributions.json"
    )
    for number, chunk in enumerate(("chunk-000000000000", "chunk-000000000002"), start=1):
        block = page[page.index(f'id="skill-{number}"'):]
        block = block[: block.index("<pre>")]
        row = rows[chunk]
        assert row.confidence_interval is not None and row.adjusted_p_value is not None
        low, high = row.confidence_interval
        text = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", block)))
        assert f"Gate A β {row.coefficient:+.4f} [{low:+.4f}, {high:+.4f}]" in text
        assert f"adjusted p {row.adjusted_p_value:.3f}" in text
        assert ("within noise" if row.within_noise else "above noise bar") in text
    assert rows["chunk-000000000002"].within_noise is True and rows["chunk-000000000000"].within_noise is False


def test_skillbank_page_of_an_online_round_shows_its_rule_and_noise_verdicts(tmp_path: Path, viewer_for) -> None:
    """A bank frozen from an online gate shows the rule in use where Gate A's is, and each skill's verdict."""
    from testkit.gatekit import EffectRunner, make_bare_run, online_pool, write_config, write_split

    inputs = tmp_path / "inputs"
    inputs.mkdir()
    cfg = write_config(inputs / "bare.yaml", write_split(inputs / "splits.json"))
    bare = make_bare_run(cfg)
    pool_path = core.write_json_atomic(inputs / "pool.json", online_pool())
    root = tmp_path / "runs"
    runner = EffectRunner({"chunk-a": 0.1, "cand-001": 0.4, "chunk-b": -0.1, "cand-002": 0.02})
    _run(root, "ckpt-a", tasks=2, repeats=1)
    base = viewer_for([root]).base_url
    for rule, name in (("published", "strictly_positive_top_k"), ("above_noise", "above_noise_bar_top_k")):
        round_dir = root / "rounds" / f"round-{rule}"
        result = core.run_online_gate(
            core.OnlineGateConfig(output_dir=round_dir / "online_gate", experiment_config=cfg, bare_run_dir=bare,
                                  candidate_pool_path=pool_path, bootstrap_samples=50, selection_rule=rule),
            runner=runner,
        )
        assert isinstance(result.contributions, OnlineContributions)
        snap = core.freeze_round_bank(round_dir)
        noise_bar = result.contributions.estimates["reward"].noise_bar
        assert noise_bar is not None
        bar = noise_bar.noise_bar
        rows = {c.intervention_id: c for c in result.contributions.contributions}
        page = _get(base, "/skillbank", path=snap.path.relative_to(root).as_posix())
        assert _text(page, "gate") == (
            f"online gate selection rule rewrite_winners_then_{name} · sign-flip noise bar {bar:.4f} (the largest "
            f"|β| no effect produces, 95%) · from rounds/round-{rule}/online_gate/contributions.json"
        )
        shown = {}
        for number, skill in enumerate(snap.skill_ids, start=1):
            block = page[page.index(f'id="skill-{number}"') :]
            shown[skill] = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", block[: block.index("<pre>")])))
        # the rewrite cand-001 won chunk-a's slot and keeps its id; cand-002 (β 0.02) is within noise
        assert rows["cand-001"].within_noise is False and rows["cand-002"].within_noise is True
        assert "above noise bar" in shown["chunk-a"] and "online gate β +0.4000" in shown["chunk-a"]
        assert f"adjusted p {rows['cand-001'].adjusted_p_value:.3f}" in shown["chunk-a"]
        if rule == "published":
            assert "within noise" in shown["cand-002"]  # selected by β > 0, marked on the page
        else:
            assert list(shown) == ["chunk-a"]  # the controlling rule left it out

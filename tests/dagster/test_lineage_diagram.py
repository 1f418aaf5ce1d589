"""docs/concepts.md's lineage diagram is the code location's asset graph: same assets, checks, edges and jobs.

The diagram is a Mermaid flowchart written in a small, strict subset (parsed here line by line; any
other line fails the test): ``subgraph <id>["<job>"]`` … ``end`` boxes are jobs, ``<id>["<key><br/>✓
<check>, …"]`` lines are assets with their checks, ``<a> --> <b>`` and ``<a> -- "<suite>" --> <b>`` are
edges. ``{suite}`` in a key or job name stands for every suite of the settings; a suite-labelled edge
leaves only that suite's asset.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
import pytest

from shopsimrl_dagster.definitions import defs
from shopsimrl_dagster.settings import load_pipeline_settings

REPO_ROOT = Path(__file__).resolve().parents[2]
CONCEPTS = REPO_ROOT / "docs" / "concepts.md"
SUITE = "{suite}"

_SUBGRAPH = re.compile(r'^subgraph (?P<id>\w+)(?:\["(?P<title>[^"]+)"\])?$')
_NODE = re.compile(r'^(?P<id>\w+)\["(?P<label>[^"]+)"\]$')
_EDGE = re.compile(r'^(?P<a>\w+) (?:-- "(?P<suite>\w+)" )?--> (?P<b>\w+)$')


@dataclass
class Diagram:
    """The graph a diagram states, with ``{suite}`` expanded over *suites*."""

    assets: set[str] = field(default_factory=set)
    checks: set[tuple[str, str]] = field(default_factory=set)
    edges: set[tuple[str, str]] = field(default_factory=set)
    jobs: dict[str, set[str]] = field(default_factory=dict)


def mermaid_block(markdown: str, after_heading: str) -> list[str]:
    """The lines of the first ``mermaid`` code block after *after_heading*, stripped."""
    text = markdown[markdown.index(after_heading) :]
    start = text.index("```mermaid\n") + len("```mermaid\n")
    return [line.strip() for line in text[start : text.index("```", start)].splitlines() if line.strip()]


def parse_diagram(lines: list[str], suites: list[str]) -> Diagram:
    """The diagram of *lines* (strict: an unknown line, node or job raises ``ValueError``)."""
    if not lines or lines[0] != "flowchart LR":
        raise ValueError("the block must start with 'flowchart LR'")
    keys: dict[str, str] = {}  # node id -> key template
    diagram = Diagram()
    job: str | None = None

    def expand(template: str) -> list[tuple[str, str]]:
        return [(s, template.replace(SUITE, s)) for s in suites] if SUITE in template else [("", template)]

    for line in lines[1:]:
        if m := _SUBGRAPH.match(line):
            if job is not None:
                raise ValueError(f"nested subgraph: {line!r}")
            job = m["title"] or m["id"]
            for _, name in expand(job):
                diagram.jobs.setdefault(name, set())
        elif line == "end":
            if job is None:
                raise ValueError("'end' outside a subgraph")
            job = None
        elif m := _NODE.match(line):
            key, _, check_text = m["label"].partition("<br/>✓ ")
            keys[m["id"]] = key
            for suite, name in expand(key):
                diagram.assets.add(name)
                diagram.checks.update((name, check.strip()) for check in check_text.split(",") if check.strip())
                if job is not None:
                    diagram.jobs[job.replace(SUITE, suite) if suite else job].add(name)
        elif m := _EDGE.match(line):
            if m["a"] not in keys or m["b"] not in keys:
                raise ValueError(f"edge between undeclared nodes: {line!r}")
            # One edge per suite when either end is per suite; a suite label keeps that suite's only.
            templated = SUITE in keys[m["a"]] or SUITE in keys[m["b"]]
            for suite in suites if templated else [""]:
                if m["suite"] and suite != m["suite"]:
                    continue
                diagram.edges.add((keys[m["a"]].replace(SUITE, suite), keys[m["b"]].replace(SUITE, suite)))
        else:
            raise ValueError(f"not part of the diagram's subset: {line!r}")
    if job is not None:
        raise ValueError(f"subgraph {job!r} is not closed")
    return diagram


def location_graph(location: dg.Definitions) -> Diagram:
    """The same facts read from the loaded definitions."""
    repo = location.get_repository_def()
    graph = repo.asset_graph
    found = Diagram()
    for key in graph.get_all_asset_keys():
        name = key.to_user_string()
        found.assets.add(name)
        found.edges.update((parent.to_user_string(), name) for parent in graph.get(key).parent_keys)
    for assets in repo.assets_defs_by_key.values():
        found.checks.update((spec.asset_key.to_user_string(), spec.name) for spec in assets.check_specs)
    for job in repo.get_all_jobs():
        if not job.name.startswith("__"):  # Dagster's implicit asset job
            found.jobs[job.name] = {k.to_user_string() for k in job.asset_layer.executable_asset_keys}
    return found


@pytest.fixture(scope="module")
def location() -> dg.Definitions:
    with dg.instance_for_test():
        return defs()


@pytest.fixture(scope="module")
def diagram() -> Diagram:
    suites = sorted(load_pipeline_settings().suites)
    return parse_diagram(mermaid_block(CONCEPTS.read_text(encoding="utf-8"), "## The lineage"), suites)


def test_the_diagram_has_exactly_the_locations_assets_and_checks(diagram: Diagram, location: dg.Definitions) -> None:
    found = location_graph(location)
    assert diagram.assets == found.assets
    assert diagram.checks == found.checks


def test_the_diagram_has_exactly_the_locations_edges(diagram: Diagram, location: dg.Definitions) -> None:
    found = location_graph(location)
    assert sorted(diagram.edges - found.edges) == [], "edges in docs/concepts.md the location does not have"
    assert sorted(found.edges - diagram.edges) == [], "edges of the location docs/concepts.md does not draw"


def test_the_diagram_boxes_are_the_locations_jobs(diagram: Diagram, location: dg.Definitions) -> None:
    assert diagram.jobs == location_graph(location).jobs


def test_the_parser_expands_suites_and_refuses_what_it_does_not_know() -> None:
    lines = [
        "flowchart LR",
        'subgraph evaluate_suite["evaluate_{suite}"]',
        'r["{suite}/rollout_traces<br/>✓ coverage_complete"]',
        'e["{suite}/eval_summary"]',
        "end",
        'x["episode_labels"]',
        'p["job_plan"]',
        "p --> r",
        "r --> e",
        'e -- "b" --> x',
    ]
    parsed = parse_diagram(lines, ["a", "b"])
    assert parsed.assets == {"a/rollout_traces", "b/rollout_traces", "a/eval_summary", "b/eval_summary",
                             "episode_labels", "job_plan"}  # fmt: skip
    assert parsed.checks == {("a/rollout_traces", "coverage_complete"), ("b/rollout_traces", "coverage_complete")}
    assert parsed.edges == {("a/rollout_traces", "a/eval_summary"), ("b/rollout_traces", "b/eval_summary"),
                            ("b/eval_summary", "episode_labels"), ("job_plan", "a/rollout_traces"),
                            ("job_plan", "b/rollout_traces")}  # fmt: skip
    assert parsed.jobs == {"evaluate_a": {"a/rollout_traces", "a/eval_summary"},
                           "evaluate_b": {"b/rollout_traces", "b/eval_summary"}}  # fmt: skip
    for bad in ("r ==> e", "r --> nowhere", 'y("round")'):
        with pytest.raises(ValueError):
            parse_diagram([*lines, bad], ["a"])

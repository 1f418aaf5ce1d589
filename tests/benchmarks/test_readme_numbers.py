"""README's performance numbers and docs/benchmarks.md's tables agree with the committed results (issue 25).

No speed is asserted: these tests read the results files a benchmark run wrote and the prose that quotes
them. A fresh run that changes ``benchmarks/results/client_shape.json`` or the ``run_index`` curve without
README.md and docs/benchmarks.md fails here, and so does a README number that no run supports.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `benchmarks` is a top-level folder, not an installed package
    sys.path.insert(0, str(ROOT))

from benchmarks._headline import expected_tokens, readme_section, tokens_in  # noqa: E402
from benchmarks._index_report import SCHEMA, curve, markdown_curve  # noqa: E402
from benchmarks._shape_report import headline, markdown_table  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def _load(name: str) -> dict[str, Any]:
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def _readme_section() -> str:
    return readme_section((ROOT / "README.md").read_text(encoding="utf-8"))


def test_readme_quotes_exactly_the_measured_ranges() -> None:
    expected = expected_tokens(_load("client_shape.json"), _load("run_index_curve.json"))
    quoted = tokens_in(_readme_section())
    assert all(expected.values()), f"the results hold no headline numbers: {expected}"
    for kind, values in expected.items():
        assert quoted[kind] == values, (
            f"README.md 'Performance in one line', {kind}: quoted, not in the results {sorted(quoted[kind] - values)}, "
            f"measured but not quoted {sorted(values - quoted[kind])} (benchmarks/_headline.py says the formats)"
        )


def test_docs_benchmarks_holds_the_tables_of_the_results() -> None:
    docs = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    shape_table = markdown_table(_load("client_shape.json"))
    assert shape_table in docs, f"docs/benchmarks.md lacks the client_shape table of the results:\n{shape_table}"
    curve_table = markdown_curve(_load("run_index_curve.json"))
    assert curve_table in docs, f"docs/benchmarks.md lacks the run_index curve table of the results:\n{curve_table}"


def test_the_summaries_in_the_results_follow_from_their_runs() -> None:
    # headline and curve are derived data: a hand edit of either (without the runs) is caught here
    shape = _load("client_shape.json")
    assert headline(shape["rows"]) == shape["headline"]
    sizes = {}
    for path in RESULTS.glob("run_index-*.json"):
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("schema") == SCHEMA:
            sizes[int(doc["episodes"])] = doc
    assert sizes, "no run_index-<N>.json of today's schema in benchmarks/results"
    assert curve(sizes) == _load("run_index_curve.json")


def test_the_check_fails_when_prose_and_results_part() -> None:
    shape, curve_doc = _load("client_shape.json"), _load("run_index_curve.json")
    section = _readme_section()
    expected = expected_tokens(shape, curve_doc)
    # a README number the results do not hold
    token = sorted(expected["cpu_ratio"])[0]
    assert tokens_in(section.replace(f"{token}×", "9.99×"))["cpu_ratio"] != expected["cpu_ratio"]
    # a results file that moved without README
    moved = copy.deepcopy(shape)
    entry = moved["headline"]["c64_0ms_1024"]["cpu_per_step_ratio"]
    entry["max"] = round(entry["max"] + 0.05, 3)
    assert expected_tokens(moved, curve_doc)["cpu_ratio"] != tokens_in(section)["cpu_ratio"]
    resumed = copy.deepcopy(curve_doc)
    resumed["rows"][-1]["resume"]["cpu_s"]["median"] += 1.0
    assert expected_tokens(shape, resumed)["cpu_s"] != tokens_in(section)["cpu_s"]

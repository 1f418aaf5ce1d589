"""Docs stay in step with the code: every config key in docs/config.md, every error code in docs/errors.md,
the JSON Schemas in docs/schemas/ generated from the current document models."""

from __future__ import annotations

import re
from pathlib import Path

from shopsimrl_core import _errors
from shopsimrl_core.runs.config._config import _SECTIONS

REPO = Path(__file__).resolve().parents[2]


def test_every_config_key_is_documented() -> None:
    text = (REPO / "docs" / "config.md").read_text(encoding="utf-8")
    for section, model in _SECTIONS.items():
        assert f"## {section}" in text
        body = text.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
        for key in model.model_fields:
            assert f"| `{key}` |" in body, f"{section}.{key} missing from docs/config.md"


def test_every_error_code_has_a_section() -> None:
    headings = set(re.findall(r"^## ([a-z0-9-]+)$", (REPO / "docs" / "errors.md").read_text(encoding="utf-8"), re.M))
    codes = {
        cls.code for cls in vars(_errors).values() if isinstance(cls, type) and issubclass(cls, _errors.ShopSimRLError)
    }
    for module in sorted((REPO / "shopsimrl_core").rglob("*.py")):
        codes |= set(re.findall(r'code="([a-z0-9-]+)"', module.read_text(encoding="utf-8")))
    assert codes - headings == set()


def test_json_schemas_are_current() -> None:
    from shopsimrl_core.documents._schemas import stale_schemas

    stale = stale_schemas(REPO / "docs" / "schemas")
    assert stale == [], f"stale schemas {stale}; run scripts/generate_schemas.py"


def test_schema_check_notices_a_changed_file(tmp_path: Path) -> None:
    from shopsimrl_core.documents._schemas import stale_schemas, write_schemas

    written = write_schemas(tmp_path)
    assert stale_schemas(tmp_path) == []
    written[0].write_text("{}\n", encoding="utf-8")
    (tmp_path / "shopsimrl-gone-v0.schema.json").write_text("{}\n", encoding="utf-8")
    assert stale_schemas(tmp_path) == sorted([written[0].name, "shopsimrl-gone-v0.schema.json"])


def test_every_citation_in_the_code_names_a_heading_of_the_reference_documents() -> None:
    from testkit.citations import unresolved

    problems = unresolved()
    assert problems == [], "\n".join(problems[:20]) + "\nrun scripts/name_citations.py --apply, or fix the number"


def test_the_citation_reader_follows_the_readme_rules(tmp_path: Path) -> None:
    from testkit.citations import DOCUMENTS, citations, headings, resolves

    sections = headings(DOCUMENTS["runtime-semantics"])
    assert {"14.2", "12", "A"} <= sections and resolves("14.2.8", sections) and not resolves("99.1", sections)
    module = tmp_path / "m.py"
    module.write_text('"""Uses runtime-semantics §9 (and http-contract §4–§6, §18)."""\n'
                      "# §7.2 retries; RFC 9112 §6.3 framing\n", encoding="utf-8")
    found = [(c.document, c.number) for c in citations(module)]
    assert found == [("runtime-semantics", "9"), ("http-contract", "4"), ("http-contract", "6"),
                     ("http-contract", "18"), ("runtime-semantics", "7.2")]
    bare = tmp_path / "bare.py"
    bare.write_text("# see §3\n", encoding="utf-8")
    assert [c.document for c in citations(bare)] == [None]

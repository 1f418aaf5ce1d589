"""Docs stay in step with the code: every config key in docs/config.md, every error code in docs/errors.md."""

from __future__ import annotations

import re
from pathlib import Path

from shopsimrl_core import _errors
from shopsimrl_core.runs._config import _SECTIONS

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
    codes = {cls.code for cls in vars(_errors).values() if isinstance(cls, type) and issubclass(cls, _errors.ShopSimRLError)}
    for module in sorted((REPO / "shopsimrl_core").rglob("*.py")):
        codes |= set(re.findall(r'code="([a-z0-9-]+)"', module.read_text(encoding="utf-8")))
    assert codes - headings == set()

"""Skill providers, SkillBank validation, selection and hashes (runtime spec §11, §2.3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shopsimrl_core import ConfigError, JsonSkillBank, NoSkills, load_skill_provider, load_skillbank
from shopsimrl_core._hashing import fingerprint
from shopsimrl_core.episode._skillbank import SkillProvider, bank_sha256, content_sha256

BANK = {
    "schema_version": "shopsimrl-skillbank-v1",
    "bank_version": "my-bank-1",
    "metadata": {"injection_order": "canonical_draft_order"},
    "skills": [
        {"skill_id": "g1", "version": "active-1", "enabled": True, "content": "### 规格核验\n- a",
         "metadata": {"estimated_effect": 0.07}},
        {"skill_id": "off", "enabled": False, "content": "disabled"},
        {"skill_id": "t19", "task_ids": [19, 20], "content": "task scoped", "version": 2},
        {"skill_id": "g2", "content": "global two", "content_sha256": "ignored", "extra": 1},
    ],
}


def write(tmp_path: Path, value, name="bank.json", **dump) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(value, ensure_ascii=False, **dump), encoding="utf-8")
    return path


def test_content_hash_is_the_json_quoted_string():
    assert content_sha256("abc") == "6cc43f858fbb763301637b5af970e2a46b46f461f27e5a0f41e009c59b827b25"
    assert content_sha256("规格\n核验") == "ebbf7fd6ec7513d73ea1d4edb827aa009f60d1d7bdb84013e3f530adc54b6d71"


def test_bank_hash_ignores_formatting(tmp_path: Path):
    compact = load_skillbank(write(tmp_path, BANK, "a.json"))
    pretty = load_skillbank(write(tmp_path, BANK, "b.json", indent=4))
    assert bank_sha256(compact) == bank_sha256(pretty) == fingerprint(BANK)


def test_no_skills_is_the_bare_provider():
    provider = load_skill_provider(None, None)
    assert isinstance(provider, NoSkills) and isinstance(provider, SkillProvider)
    assert provider.identity == {"provider": "none"}
    assert provider.select({"task_id": 1}) == []


def test_global_and_task_scoped_selection_in_file_order(tmp_path: Path):
    provider = load_skill_provider(write(tmp_path, BANK), None)
    assert provider.identity == {
        "provider": "json_skillbank",
        "schema_version": "shopsimrl-skillbank-v1",
        "bank_version": "my-bank-1",
        "bank_sha256": fingerprint(BANK),
        "max_skills": None,
    }
    for_19 = provider.select({"task_id": 19})
    assert [s["skill_id"] for s in for_19] == ["g1", "t19", "g2"]
    assert [s["skill_id"] for s in provider.select({"task_id": 5})] == ["g1", "g2"]
    first = for_19[0]
    assert list(first) == ["skill_id", "content", "version", "metadata", "content_sha256"]
    assert first["metadata"] == {"estimated_effect": 0.07, "selection_scope": "global"}
    assert first["content_sha256"] == fingerprint("### 规格核验\n- a")
    assert for_19[1]["metadata"] == {"selection_scope": "task"} and for_19[1]["version"] == "2"
    assert for_19[2]["version"] == "1"
    # the bank record's metadata is copied, never mutated
    assert BANK["skills"][0]["metadata"] == {"estimated_effect": 0.07}


def test_max_skills_cuts_selection_and_enters_identity(tmp_path: Path):
    provider = load_skill_provider(write(tmp_path, BANK), 2)
    assert [s["skill_id"] for s in provider.select({"task_id": 19})] == ["g1", "t19"]
    assert provider.identity["max_skills"] == 2
    with pytest.raises(ConfigError, match="max_skills"):
        JsonSkillBank(BANK, max_skills=0)


def test_defaults_for_missing_versions():
    bank = {"skills": [{"skill_id": "a", "content": "x"}]}
    provider = JsonSkillBank(bank)
    assert provider.identity["schema_version"] == "shopsimrl-skillbank-v1"
    assert provider.identity["bank_version"] == "1"


@pytest.mark.parametrize(
    ("bank", "message"),
    [
        ({"skills": {}}, "SkillBank must contain a skills list"),
        ({}, "SkillBank must contain a skills list"),
        ({"skills": [{"content": "x"}]}, r"skills\[0\]\.skill_id"),
        ({"skills": [{"skill_id": "a", "content": "   "}]}, r"skills\[0\]\.content"),
        ({"skills": [{"skill_id": "a", "content": "x", "task_ids": [1, True]}]}, r"skills\[0\]\.task_ids"),
        ({"skills": [{"skill_id": "a", "content": "x", "task_ids": "1"}]}, r"skills\[0\]\.task_ids"),
        ({"schema_version": "v9", "skills": []}, "schema_version"),
        ([], "JSON object"),
    ],
)
def test_invalid_banks_name_file_and_field(tmp_path: Path, bank, message):
    path = write(tmp_path, bank)
    with pytest.raises(ConfigError, match=message) as info:
        load_skillbank(path)
    assert str(path) in str(info.value)


def test_unreadable_and_non_json_bank(tmp_path: Path):
    with pytest.raises(ConfigError, match="cannot read SkillBank"):
        load_skillbank(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_skill_provider(bad, None)

"""Prompt assembly (runtime spec §9.2, §9.4, §10) and prompt identities (§1.1 rule 5, §10.5)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shopsimrl_core import ConfigError, load_prompt
from shopsimrl_core._hashing import fingerprint
from shopsimrl_core._versions import (
    ACTION_PROTOCOL,
    OWN_ACTION_PROTOCOL,
    OWN_ACTION_PROTOCOL_EN,
    OWN_PROMPT_VERSION,
    OWN_PROMPT_VERSION_EN,
    OWN_SKILL_RENDERER_VERSION,
    PROMPT_VERSION,
    SKILL_RENDERER_VERSION,
)
from shopsimrl_core.episode._prompts import builtin_system_prompt, load_prompt_texts, repair_feedback_text


def test_builtin_prompt_carries_project_identity_not_legacy_strings():
    prompt = load_prompt()
    assert prompt.identity == {
        "prompt_version": OWN_PROMPT_VERSION,
        "system_prompt_sha256": fingerprint(builtin_system_prompt("zh")),
        "skill_renderer_version": OWN_SKILL_RENDERER_VERSION,
    }
    assert list(prompt.identity) == ["prompt_version", "system_prompt_sha256", "skill_renderer_version"]
    assert prompt.action_protocol == OWN_ACTION_PROTOCOL
    assert OWN_ACTION_PROTOCOL != ACTION_PROTOCOL and OWN_PROMPT_VERSION != PROMPT_VERSION
    # the built-in prompt is our own text, so it cannot hash like the legacy file
    assert prompt.identity["system_prompt_sha256"] != "003c66328df66db57a6f67150f0928e914970b363501ab1f4c039bc46b53be6d"


def test_builtin_prompt_conveys_every_point_of_10_2():
    text = builtin_system_prompt("zh")
    for needle in (
        "购物",
        "用户个人文档",
        "一次工具",
        "search",
        "原样复制",
        "规格轴",
        "完全符合",
        "新页面",
        "Thought",
        "JSON",
        "XML",
        "思考",
    ):
        assert needle in text, needle
    english = builtin_system_prompt("en")
    for needle in ("exactly one tool", "search", "copy", "every option axis", "fits completely", "new page", "Thought"):
        assert needle in english, needle


def test_identity_hashes_the_loaded_string_before_rstrip(tmp_path: Path):
    inline = load_prompt(system_prompt="abc")
    assert inline.identity["system_prompt_sha256"] == "6cc43f858fbb763301637b5af970e2a46b46f461f27e5a0f41e009c59b827b25"
    f = tmp_path / "p.txt"
    f.write_text("规格\n核验", encoding="utf-8")
    loaded = load_prompt(system_prompt_file=f)
    assert loaded.identity["system_prompt_sha256"] == "ebbf7fd6ec7513d73ea1d4edb827aa009f60d1d7bdb84013e3f530adc54b6d71"
    trailing = load_prompt(system_prompt="abc\n")
    assert trailing.identity["system_prompt_sha256"] != inline.identity["system_prompt_sha256"]
    assert trailing.system_message({}, []) == "abc"


def test_both_prompt_sources_and_bad_files_are_config_errors(tmp_path: Path):
    with pytest.raises(ConfigError, match="both set"):
        load_prompt(system_prompt="a", system_prompt_file=tmp_path / "x.txt")
    with pytest.raises(ConfigError, match="cannot read system prompt file"):
        load_prompt(system_prompt_file=tmp_path / "missing.txt")
    (tmp_path / "blank.txt").write_text("  \n", encoding="utf-8")
    with pytest.raises(ConfigError, match="empty"):
        load_prompt(system_prompt_file=tmp_path / "blank.txt")
    with pytest.raises(ConfigError, match="language"):
        load_prompt(language="fr")


def test_legacy_protocol_texts_file_gives_legacy_identities(tmp_path: Path):
    texts = load_prompt_texts()
    texts.update(
        schema_version="shopsimrl-prompt-texts-v1",
        prompt_version=PROMPT_VERSION,
        action_protocol=ACTION_PROTOCOL,
        skill_renderer_version=SKILL_RENDERER_VERSION,
        repair_instruction="legacy repair text",
    )
    path = tmp_path / "legacy_texts.json"
    path.write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
    prompt = load_prompt(system_prompt="legacy prompt", prompt_texts_file=path)
    assert prompt.identity["prompt_version"] == PROMPT_VERSION
    assert prompt.identity["skill_renderer_version"] == SKILL_RENDERER_VERSION
    assert prompt.action_protocol == ACTION_PROTOCOL
    assert prompt.repair_feedback("c", "m", [])["instruction"] == "legacy repair text"


def test_bad_protocol_texts_file_names_file_and_key(tmp_path: Path):
    texts = load_prompt_texts()
    texts["schema_version"] = "shopsimrl-prompt-texts-v1"
    del texts["click_description"]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(texts), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"t\.json: click_description: must be a non-empty string"):
        load_prompt(prompt_texts_file=path)
    path.write_text(json.dumps({"schema_version": "other"}), encoding="utf-8")
    with pytest.raises(ConfigError, match="schema_version"):
        load_prompt(prompt_texts_file=path)


def test_english_variant_has_distinct_identities():
    prompt = load_prompt(language="en")
    assert prompt.identity["prompt_version"] == OWN_PROMPT_VERSION_EN
    assert prompt.action_protocol == OWN_ACTION_PROTOCOL_EN
    assert prompt.first_user_message("buy", "page").startswith("Shopping task:\nbuy")


def test_system_message_persona_and_skill_block_layout():
    prompt = load_prompt(system_prompt="PROMPT\n\n")
    persona = {"风格偏好": ["简约"], "性别": "女"}
    skills = [
        {"skill_id": "chunk-0a1b", "content": "\n### 规格核验\n- a\n", "version": "active-1"},
        {"skill_id": 'q"id', "content": "two", "version": "1"},
    ]
    message = prompt.system_message(persona, skills)
    sections = message.split("\n\n")
    assert sections[0] == "PROMPT"
    assert sections[1] == "用户个人文档：\n" + '{"性别": "女", "风格偏好": ["简约"]}'
    block = "\n\n".join(sections[2:]).split("\n")
    assert block[0] == prompt.skill_header and block[1] == prompt.skill_explanation
    assert block[2:] == [
        '<skill id="chunk-0a1b" version="active-1">',
        "### 规格核验",
        "- a",
        "</skill>",
        '<skill id="q\\"id" version="1">',
        "two",
        "</skill>",
    ]
    # no persona section for an empty persona, no skill block without skills
    assert prompt.system_message({}, []) == "PROMPT"
    assert prompt.system_message(None, []) == "PROMPT"


def test_first_user_message():
    prompt = load_prompt()
    assert prompt.first_user_message("买耳机", "页面：搜索首页\n") == "购物任务：\n买耳机\n\n页面：搜索首页\n"


def test_tool_schemas_follow_the_page():
    prompt = load_prompt()
    home = prompt.tool_schemas(True, [])
    assert [t["function"]["name"] for t in home] == ["search"]
    params = home[0]["function"]["parameters"]
    assert params["required"] == ["query"] and params["additionalProperties"] is False
    assert params["properties"]["query"]["minLength"] == 1
    results = prompt.tool_schemas(False, ["back to search", "next >", "640012345678"])
    assert [t["function"]["name"] for t in results] == ["click"]
    assert results[0]["function"]["parameters"]["properties"]["value"]["enum"] == [
        "back to search",
        "next >",
        "640012345678",
    ]
    both = prompt.tool_schemas(True, ["x"])
    assert [t["function"]["name"] for t in both] == ["search", "click"]
    assert prompt.tool_schemas(False, []) == []


def test_repair_feedback_serialisation_is_compact_and_ordered():
    prompt = load_prompt()
    feedback = prompt.repair_feedback("mixed_content", "msg", ["click"])
    assert list(feedback) == ["type", "code", "message", "instruction", "available_tools"]
    text = repair_feedback_text(feedback)
    assert text.startswith('{"type":"tool_protocol_error","code":"mixed_content","message":"msg","instruction":"')
    assert text.endswith('","available_tools":["click"]}')
    assert "上一轮没有执行任何环境操作" in text  # non-ASCII literal, not \u-escaped

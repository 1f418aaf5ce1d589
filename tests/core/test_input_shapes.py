"""Inputs a person wrote that used to hang, crash or pass silently (issue 24) get one line each: a YAML
alias bomb and a 5,000-deep list in the config, a split JSON nested 5,000 deep or giving a key twice, and
malformed ``.env`` lines."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from shopsimrl_core import ConfigError, load_config
from shopsimrl_core.runs.config._dotenv import parse_dotenv
from shopsimrl_core.runs.config._safe_yaml import yaml_shape_problem
from shopsimrl_core.runs.planning._splits import load_split_file

SPLITS = {"splits": {"val": {"role": "val", "persona": True, "task_ids": [1, 2, 3]}}}


def alias_bomb(levels: int = 9) -> str:
    """The billion laughs: each anchor repeats the previous one nine times (9**9 values)."""
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        prev, name = chr(96 + i), chr(97 + i)
        lines.append(f"{name}: &{name} [{', '.join(['*' + prev] * 9)}]")
    return "\n".join(lines) + "\n"


def _config(tmp_path: Path, extra: str) -> Path:
    (tmp_path / "splits.json").write_text(json.dumps(SPLITS), encoding="utf-8")
    base = {
        "tasks": {"split_file": "splits.json", "split": "val"},
        "environment": {"base_url": "http://127.0.0.1:9", "persona": None},
        "model": {"name": "m", "base_url": "http://127.0.0.1:9/v1", "api_key_env": None},
    }
    path = tmp_path / "eval.yaml"
    path.write_text(yaml.safe_dump(base) + extra, encoding="utf-8")
    return path


def _one_line(exc: pytest.ExceptionInfo[ConfigError]) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_an_alias_bomb_in_the_config_fails_fast_in_one_line(tmp_path: Path) -> None:
    path = _config(tmp_path, "bomb:\n" + "".join("  " + line + "\n" for line in alias_bomb().splitlines()))
    started = time.monotonic()
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert time.monotonic() - started < 5
    message = _one_line(caught)
    assert caught.value.code == "config-invalid" and message.startswith(f"{path}: expands to more than 100,000")


def test_a_5000_deep_list_in_the_config_is_one_line(tmp_path: Path) -> None:
    path = _config(tmp_path, "deep: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert "nested more than 64 levels deep" in _one_line(caught)


def test_small_aliases_and_ordinary_configs_still_load(tmp_path: Path) -> None:
    assert yaml_shape_problem("a: &x {k: [1, 2]}\nb: *x\n") is None
    assert load_config(_config(tmp_path, "")).tasks.split == "val"
    assert yaml_shape_problem(alias_bomb(3)) is None  # 9**3 = 729 values: fine


def test_a_5000_deep_split_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "splits.json"
    path.write_text('{"splits": {"val": {"task_ids": ' + "[" * 5000 + "]" * 5000 + "}}}", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_split_file(path)
    assert caught.value.code == "split-invalid" and "nested too deep to read" in _one_line(caught)


@pytest.mark.parametrize(
    ("text", "where", "key"),
    [
        ('{"splits": {"val": {"task_ids": [1]}, "val": {"task_ids": [2]}}}', "splits", "val"),
        ('{"splits": {"val": {"task_ids": [1], "persona": true, "task_ids": [2]}}}', "splits.val", "task_ids"),
        ('{"version": "a", "version": "b", "splits": {}}', "(top level)", "version"),
    ],
)
def test_a_key_given_twice_in_a_split_file_is_refused(tmp_path: Path, text: str, where: str, key: str) -> None:
    path = tmp_path / "splits.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_split_file(path)
    assert _one_line(caught).startswith(f"{path}: {where}: duplicate key {key!r}")


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("noequals", "has no '='"),
        ("MY KEY=1", "'MY KEY' is not an environment variable name"),
        ('TOKEN="abc', 'the value of TOKEN opens a " quote it never closes'),
        ("A=1\nA=2", "A is set again (first at line 2)"),
    ],
)
def test_malformed_dotenv_lines_are_refused_naming_file_and_line(tmp_path: Path, line: str, problem: str) -> None:
    path = tmp_path / ".env"
    path.write_text("# keys\n" + line + "\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        parse_dotenv(path)
    message = _one_line(caught)
    number = 2 + line.count("\n")
    assert caught.value.code == "dotenv-invalid" and message.startswith(f"{path}:{number}: {problem}")
    assert "abc" not in message.removeprefix(str(path))  # never a value: it may be a secret

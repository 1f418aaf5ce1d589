"""Config loading: legacy schema and defaults, path resolution, sanitisation, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from testkit.core_runkit import small_splits, write_config

from shopsimrl_core import ConfigError, load_config
from shopsimrl_core.runs.config._config_sections import sanitize_name
from shopsimrl_core.runs.config._dotenv import apply_dotenv, parse_dotenv


def test_legacy_defaults_and_normalisation(tmp_path: Path) -> None:
    small_splits(tmp_path)
    path = tmp_path / "base test run.yaml"
    path.write_text(yaml.safe_dump({
        "tasks": {"split_file": "splits.json", "split": "val"},
        "model": {"name": "served/model:v1", "base_url": "http://x/v1", "temperature": 1, "timeout": 180},
    }), encoding="utf-8")
    config = load_config(path)
    assert config.experiment.name == "base-test-run"  # file stem, sanitised
    assert config.model_id == "served-model-v1"
    assert config.output_dir_path == (tmp_path.parent / "runs").resolve()
    assert config.split_file_path == tmp_path / "splits.json"
    assert (
        config.experiment.seed == 20260828 and config.experiment.concurrency == 1 and config.experiment.resume is True
    )
    assert config.environment.base_url == "http://127.0.0.1:5700" and config.environment.timeout == 30.0
    assert config.runtime.max_steps == 30 and config.tasks.repeats == 1 and config.tasks.sample_size is None
    m = config.model
    assert (m.api_key_env, m.max_tokens, m.max_retries, m.retry_backoff_seconds) == ("OPENAI_API_KEY", 512, 5, 1.0)
    assert (m.trust_env, m.stream, m.send_seed, m.tool_choice, m.extra_body) == (True, False, True, "auto", {})
    # numbers keep the normalised type: ints given for float keys become floats (hashing depends on it)
    assert isinstance(m.temperature, float) and m.temperature == 1.0 and isinstance(m.timeout, float)
    assert config.experiment.attempts_per_invocation == 3


def test_paths_resolve_against_yaml_folder(tmp_path: Path) -> None:
    (tmp_path / "cfg").mkdir()
    small_splits(tmp_path)
    (tmp_path / "prompt.txt").write_text("你是购物助手。\n", encoding="utf-8")
    path = write_config(
        tmp_path / "cfg",
        split_file="../splits.json",
        overrides={"prompt": {"system_prompt_file": "../prompt.txt"}, "experiment": {"output_dir": "../out"}},
    )
    config = load_config(path)
    assert config.split_file_path == tmp_path / "splits.json"
    assert config.system_prompt_file_path == tmp_path / "prompt.txt"
    assert config.run_dir == tmp_path / "out" / "exp"


@pytest.mark.parametrize(
    ("raw", "expected"), [("  a b//c  ", "a-b-c"), ("..x..", "x"), ("-é-y-", "y"), ("ok_1.2-3", "ok_1.2-3")]
)
def test_sanitize_name(raw: str, expected: str) -> None:
    assert sanitize_name(raw) == expected


def _error(tmp_path: Path, overrides: dict) -> str:
    small_splits(tmp_path)
    path = write_config(tmp_path, overrides=overrides)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return str(info.value)


def test_unknown_key_lists_valid_keys_and_suggests(tmp_path: Path) -> None:
    message = _error(tmp_path, {"experiment": {"concurency": 4}})
    assert message.startswith(f"{tmp_path / 'eval.yaml'}: experiment.concurency: unknown key")
    assert (
        "did you mean 'concurrency'?" in message
        and "valid keys: name, output_dir, dotenv, seed, concurrency" in message
    )


def test_every_problem_on_its_own_line(tmp_path: Path) -> None:
    message = _error(
        tmp_path, {"model": {"temperature": 3, "max_tokens": "512", "stream": "yes"}, "runtime": {"max_steps": 0}}
    )
    lines = message.splitlines()
    assert len(lines) == 4
    assert any(line.endswith("model.temperature: must be <= 2 (got 3); fix the value in the YAML") for line in lines)
    assert any('model.max_tokens: must be an int (got "512")' in line for line in lines)
    assert any("model.stream: must be true or false" in line for line in lines)
    assert any("runtime.max_steps: must be >= 1 (got 0)" in line for line in lines)
    assert all(line.startswith(str(tmp_path / "eval.yaml")) for line in lines)


def test_bool_is_not_a_number(tmp_path: Path) -> None:
    assert "experiment.seed: must be an int (got true)" in _error(tmp_path, {"experiment": {"seed": True}})


def test_contradictory_values(tmp_path: Path) -> None:
    assert "set at most one of prompt.system_prompt and prompt.system_prompt_file" in _error(
        tmp_path, {"prompt": {"system_prompt": "a", "system_prompt_file": "b.txt"}}
    )
    assert "contradicts experiment.max_episode_retries" in _error(
        tmp_path, {"experiment": {"max_attempts": 5, "max_episode_retries": 1}}
    )


def test_missing_required_and_models_list(tmp_path: Path) -> None:
    message = _error(tmp_path, {"model": None, "models": [{"name": "a"}]})
    assert "model: required key is missing; add it to the YAML" in message
    assert "models: a top-level models list is not supported" in message


def test_missing_files_and_bad_yaml(tmp_path: Path) -> None:
    assert "tasks.split_file: file not found" in _error(tmp_path, {"tasks": {"split_file": "nope.json"}})
    assert "experiment.dotenv: file not found" in _error(tmp_path, {"experiment": {"dotenv": ".env"}})
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid YAML at line"):
        load_config(bad)


def test_additive_keys_accepted(tmp_path: Path) -> None:
    small_splits(tmp_path)
    path = write_config(
        tmp_path,
        overrides={
            "experiment": {"max_attempts": 4, "max_total_attempts": 6},
            "environment": {"max_connections": 8},
            "model": {"max_connections": 16},
            "prompt": {"language": "en"},
        },
    )
    config = load_config(path)
    assert config.experiment.attempts_per_invocation == 4 and config.experiment.max_total_attempts == 6
    assert config.environment.max_connections == 8 and config.model.max_connections == 16


def test_dotenv_rules_never_override(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_bytes(
        "\ufeff# comment\n\nexport A_KEY = \"quoted value\" \nB_KEY='x'\nC_KEY=plain\n".encode("utf-8")
    )
    assert parse_dotenv(env_file) == {"A_KEY": "quoted value", "B_KEY": "x", "C_KEY": "plain"}
    environ = {"C_KEY": "from-shell"}
    applied = apply_dotenv(env_file, environ)
    assert environ == {"A_KEY": "quoted value", "B_KEY": "x", "C_KEY": "from-shell"}
    assert applied == ["A_KEY", "B_KEY"]

"""The training YAML: every key documented, paths resolved against the file, one line per bad value."""

from __future__ import annotations

from pathlib import Path

import pytest

from shopsimrl_core._errors import ConfigError
from shopsimrl_core.training._config import BackendConfig, SamplingConfig, TrainingConfig, load_training_config

REPO = Path(__file__).resolve().parents[2]


def test_every_training_key_is_documented() -> None:
    text = (REPO / "docs" / "config.md").read_text(encoding="utf-8").split("## training", 1)[1]
    for model in (TrainingConfig, SamplingConfig, BackendConfig):
        for key in model.model_fields:
            if key in ("source", "base_dir"):
                continue
            assert f"| `{key}` |" in text, f"training key {key} missing from docs/config.md#training"


def test_paths_resolve_against_the_file_and_bad_values_are_one_line_each(tmp_path: Path) -> None:
    (tmp_path / "eval.yaml").write_text("tasks: {}\n", encoding="utf-8")
    good = tmp_path / "t.yaml"
    good.write_text("evaluation: eval.yaml\nout_dir: out\ncurriculum: c.json\n", encoding="utf-8")
    config = load_training_config(good)
    assert config.path(config.out_dir) == tmp_path / "out" and config.path(config.curriculum) == tmp_path / "c.json"
    assert config.group_size == 8 and config.sampling.spec().top_p == 1.0
    bad = tmp_path / "bad.yaml"
    bad.write_text("evaluation: eval.yaml\nout_dir: out\nsampling: {temprature: 1}\nbackend: {kind: tgi}\n",
                   encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_training_config(bad)
    lines = str(caught.value).splitlines()
    assert len(lines) == 2
    assert "sampling.temprature: unknown key; did you mean 'temperature'?" in lines[0] or \
        "sampling.temprature: unknown key; did you mean 'temperature'?" in lines[1]
    assert any(line.startswith(f"{bad}: backend.kind:") for line in lines)
    missing = tmp_path / "m.yaml"
    missing.write_text("evaluation: nowhere.yaml\nout_dir: out\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="evaluation: 'nowhere.yaml' is not a file"):
        load_training_config(missing)

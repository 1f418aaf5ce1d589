"""What a one-command ``shopsimrl`` process pays before and after its work (issue 33 item 14).

The cost itself is measured by ``benchmarks.client_shape --only start_1ep`` (docs/benchmarks.md), never
timed here. These tests pin the behaviour the savings rest on: the program's collector settings
(``cli/_collector.py``) and that a library call keeps the caller's; the pydantic plugin scan skipped
unless the user asks for it; what a one-episode run leaves unimported; and that the config's mutable
defaults, written as plain values to spare pydantic a signature look-up, are still one per instance.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest
from testkit.core_runkit import modules_after_one_episode_run, small_splits, write_config

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("exported", [None, ""])
def test_the_program_sets_the_collector_for_one_command(tmp_path: Path, exported: str | None) -> None:
    # console_main (the `shopsimrl` script) raises the young threshold for the whole command, freezes
    # what is alive when the command returns (the exit pass then skips it) and exits with main's code.
    probe = (
        "import atexit, gc, os\n"
        "import shopsimrl_core.cli._main as cli\n"
        "def fake(argv=None):\n"
        "    print(gc.get_threshold()[0], gc.get_freeze_count() > 0, repr(os.environ.get('PYDANTIC_DISABLE_PLUGINS')),"
        " flush=True)\n"
        "    return 7\n"
        "cli.main = fake\n"
        "atexit.register(lambda: print(gc.get_freeze_count() > 0, flush=True))\n"
        "cli.console_main()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    if exported is not None:
        env["PYDANTIC_DISABLE_PLUGINS"] = exported  # empty: the user wants pydantic's plugins
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env=env)
    assert done.returncode == 7, done.stderr[-2000:]
    expected = repr("__all__" if exported is None else exported)
    assert done.stdout.splitlines() == [f"100000 False {expected}", "True"]


def test_main_called_in_a_long_lived_process_leaves_its_collector_alone(capsys: pytest.CaptureFixture[str]) -> None:
    from shopsimrl_core.cli._main import main

    thresholds, frozen = gc.get_threshold(), gc.get_freeze_count()
    plugins = os.environ.get("PYDANTIC_DISABLE_PLUGINS")
    assert main(["plan", str(REPO / "configs" / "examples" / "sandbox-val.yaml"), "--brief"]) == 0
    assert '"episodes"' in capsys.readouterr().out
    assert (gc.get_threshold(), gc.get_freeze_count()) == (thresholds, frozen)
    assert os.environ.get("PYDANTIC_DISABLE_PLUGINS") == plugins


def test_a_one_episode_run_leaves_comparison_models_and_difflib_unimported(tmp_path: Path) -> None:
    # Each pydantic model class costs ~0.2 ms to create; the comparison documents live in their own
    # module so that a run, which never writes one, does not build them (nor difflib, which only a
    # config with an unknown key needs).
    modules = modules_after_one_episode_run(tmp_path)
    assert sorted(n for n in ("shopsimrl_core.documents._comparisons", "difflib") if n in modules) == []


def test_an_unknown_config_key_still_gets_its_did_you_mean(tmp_path: Path) -> None:
    from shopsimrl_core import ConfigError, load_config

    small_splits(tmp_path)
    path = write_config(tmp_path, overrides={"experiment": {"concurency": 4}})
    with pytest.raises(ConfigError, match=r"experiment\.concurency: unknown key .*did you mean 'concurrency'\?"):
        load_config(path)


def test_list_and_mapping_defaults_of_the_config_are_one_per_instance() -> None:
    from shopsimrl_core.runs.config._config_sections import EnvironmentConfig, ModelConfig, ServeConfig

    a, b = EnvironmentConfig(), EnvironmentConfig()
    a.base_urls.append("http://127.0.0.1:1")
    assert b.base_urls == [] and EnvironmentConfig().base_urls == []
    m, n = ModelConfig(name="m", base_url="http://127.0.0.1:2/v1"), ModelConfig(name="n", base_url="http://127.0.0.1:3/v1")
    m.extra_body["top_k"] = 5
    m.base_urls.append("http://127.0.0.1:4/v1")
    assert n.extra_body == {} and n.base_urls == []
    s, t = ServeConfig.model_construct(), ServeConfig.model_construct()
    s.env["CUDA_HOME"] = "/opt/cuda"
    s.gpus.append("0")
    s.extra_args.append("--enforce-eager")
    assert (t.env, t.gpus, t.extra_args) == ({}, [], [])

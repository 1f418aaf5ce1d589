"""The `shopsimrl` CLI as a subprocess: plan JSON, exit codes, one-line errors, guard, summarize."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from testkit.core_runkit import PERSONA_SPLITS, record, small_splits, write_config

from shopsimrl_core import RunStore

REPO = Path(__file__).resolve().parents[2]
EXE = [sys.executable, "-m", "shopsimrl_core.cli._main"]


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*EXE, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_plan_on_frozen_val_split_lists_400_jobs(tmp_path: Path) -> None:
    config = write_config(tmp_path, split_file=PERSONA_SPLITS, split="val", overrides={"tasks": {"repeats": 2}})
    done = _cli("plan", str(config))
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["episodes"] == 800 and len(plan["selected_tasks"]) == 400 and len(plan["jobs"]) == 800
    assert plan["jobs"][0] == {
        "task_id": 19,
        "sample_id": 0,
        "seed": 2694671387,
        "split": "val",
        "episode_id": "task-000019__sample-000",
    }
    assert plan["jobs"][1] == {
        "task_id": 19,
        "sample_id": 1,
        "seed": 831922249,
        "split": "val",
        "episode_id": "task-000019__sample-001",
    }
    assert plan["split"]["task_ids_sha256"] == "103c72fd5da76870d2406420a8d7eab0c616780cb6fb8ac27875b5424dae872e"
    assert plan["guarded"] is False and plan["first_jobs"] == [
        {k: v for k, v in j.items() if k != "episode_id"} for j in plan["jobs"][:5]
    ]
    assert not (tmp_path / "runs").exists()  # plan writes nothing


def test_plan_marks_guarded_split(tmp_path: Path) -> None:
    config = write_config(tmp_path, split_file=PERSONA_SPLITS, split="test")
    done = _cli("plan", "--brief", str(config))
    assert done.returncode == 0
    plan = json.loads(done.stdout)
    assert (
        plan["guarded"] is True and plan["split"]["guarded"] is True and plan["episodes"] == 400 and "jobs" not in plan
    )
    assert plan["split"]["task_ids_sha256"] == "4137a041471b29310c7e349732c55f04e8ea1c9a517cd60475d048ca1466c257"
    assert "--allow-test-split" in done.stderr


def test_run_on_test_split_without_opt_in_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    # the endpoints are unroutable: any network call would fail differently (exit 1), not exit 2
    config = write_config(tmp_path, split_file=PERSONA_SPLITS, split="test")
    done = _cli("run", str(config))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("shopsimrl: error[test-split-not-opted-in]:")
    assert done.stdout == "" and not (tmp_path / "runs").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval.yaml"]


def test_config_errors_exit_2_one_line_each(tmp_path: Path) -> None:
    small_splits(tmp_path)
    config = write_config(tmp_path, overrides={"experiment": {"concurency": 3}})
    done = _cli("run", str(config))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"shopsimrl: error[config-invalid]: {config}: experiment.concurency: unknown key (got 3); "
        "did you mean 'concurrency'? valid keys: name, output_dir, dotenv, seed, concurrency, start_spacing_seconds, "
        "resume, "
        "max_episode_retries, max_attempts, max_total_attempts, test_access_ledger, max_planned_episodes, "
        "outage_budget_seconds"
    ]


def test_run_refuses_locked_directory_and_resume_false(tmp_path: Path) -> None:
    small_splits(tmp_path)
    config = write_config(tmp_path)
    run_dir = tmp_path / "runs" / "exp"
    store = RunStore(run_dir)
    with store.lock("held-by-test"):
        done = _cli("run", str(config))
    assert done.returncode == 2 and "error[run-locked]" in done.stderr and "held-by-test" in done.stderr
    store.append(record(19))
    done = _cli("run", "--no-resume", str(config))
    assert done.returncode == 2 and "error[resume-disabled]" in done.stderr


def test_summarize_cli(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "run")
    store.append(record(1, status="failed"))
    store.append(record(1))
    store.append(record(2, reward=0.0))
    done = _cli("summarize", str(store.run_dir), "--requested", "4")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["counts"]["requested"] == 4 and summary["counts"]["completed"] == 2
    assert json.loads(store.summary_path.read_text(encoding="utf-8"))["counts"] == summary["counts"]
    missing = _cli("summarize", str(tmp_path / "nope"))
    assert missing.returncode == 2 and missing.stderr.startswith("shopsimrl: error[run-dir-missing]")


def test_core_never_imports_dagster() -> None:
    sources = sorted((REPO / "shopsimrl_core").rglob("*.py"))
    assert sources
    offenders = [
        str(p)
        for p in sources
        if any(
            line.strip().startswith(("import dagster", "from dagster"))
            for line in p.read_text(encoding="utf-8").splitlines()
        )
    ]
    assert offenders == []
    names = sorted(p.stem for p in sources if p.stem != "__init__" and p.parent.name == "shopsimrl_core")
    code = (
        "import importlib, sys\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module('shopsimrl_core.' + name)\n"
        "print(sorted(m for m in sys.modules if m == 'dagster' or m.startswith('dagster.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_unreachable_environment_is_a_refusal(tmp_path: Path) -> None:
    small_splits(tmp_path)
    config = write_config(tmp_path)  # environment at 127.0.0.1:9: nothing listens there
    done = _cli("run", str(config))
    assert done.returncode == 2 and "error[environment-unreachable]" in done.stderr
    assert not (tmp_path / "runs" / "exp").exists()


def test_retry_failed_verb_parses_as_only_failed_run() -> None:
    from shopsimrl_core.cli._main import build_parser

    args = build_parser().parse_args(["retry-failed", "x.yaml"])
    assert args.only_failed is True and args.resume is True and args.handler.__name__ == "_cmd_run"
    assert build_parser().parse_args(["run", "x.yaml"]).only_failed is False


@pytest.mark.parametrize("exported", [None, "3"])
def test_the_cli_loads_blas_with_one_thread_unless_told_otherwise(tmp_path: Path, exported: str | None) -> None:
    # numpy's OpenBLAS would start a spinning worker per core (0.15 s CPU per process); no verb does
    # linear algebra, so the CLI asks for one thread before numpy loads, and an exported value wins.
    probe = (
        "import os, sys\n"
        "from shopsimrl_core.cli._main import main\n"
        "print(os.environ.get('OPENBLAS_NUM_THREADS'), 'numpy' in sys.modules, flush=True)\n"
        "try:\n"
        "    main(['plan', sys.argv[1]])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(os.environ.get('OPENBLAS_NUM_THREADS'), flush=True)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if exported is not None:
        env["OPENBLAS_NUM_THREADS"] = exported
    config = REPO / "configs" / "examples" / "sandbox-val.yaml"
    done = subprocess.run([sys.executable, "-c", probe, str(config)], capture_output=True, text=True, cwd=tmp_path,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0] == f"{exported} False" and lines[-1] == (exported or "1")


def test_run_executes_on_uvloop_with_the_tuned_collector(tmp_path: Path) -> None:
    # `shopsimrl run` goes through run_evaluation, which runs the evaluation on its own uvloop loop
    # with a tuned collector (runs/execution/_loop.py, docs/runtime.md); before it, the process is untouched.
    probe = (
        "import asyncio, gc, os, sys\n"
        "import shopsimrl_core.runs.execution._evaluator as evaluator\n"
        "async def fake(config, options=None, **kwargs):\n"
        "    loop = type(asyncio.get_running_loop()).__module__.split('.')[0]\n"
        "    print(loop, gc.get_threshold(), gc.get_freeze_count() > 0, flush=True)\n"
        "    os._exit(0)\n"
        "evaluator.arun_evaluation = fake\n"
        "from shopsimrl_core.cli._main import main\n"
        "print(gc.get_threshold(), gc.get_freeze_count() > 0, flush=True)\n"
        "main(['run', sys.argv[1], '--progress', 'none'])\n"
    )
    config = REPO / "configs" / "examples" / "sandbox-val.yaml"
    done = subprocess.run([sys.executable, "-c", probe, str(config)], capture_output=True, text=True, cwd=tmp_path,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["(700, 10, 10) False", "uvloop (20000, 20, 20) True"]

"""The ``shopsimrl`` command line (runtime spec §5.1).

Exit codes: 0 success; 1 the run finished but some planned episode is not complete; 2 refusal
(bad config, guarded split without opt-in, fingerprint mismatch, locked run directory, …) with a
one-line error per problem on stderr; 130 interrupted (Ctrl-C; the run can be resumed).

Other layers add verbs by appending ``"module:function"`` to ``_EXTENSIONS``; the function gets
the argparse sub-parsers object and registers its parser with ``set_defaults(handler=...)``, a
handler taking the parsed arguments and returning the exit code.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shopsimrl_core._errors import ShopSimRLError

__all__ = ["main", "build_parser"]

# "module:function" entries that register extra sub-commands (see module docstring).
_EXTENSIONS: list[str] = ["shopsimrl_core.export._records:register_export_cli"]


def _print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def _cmd_plan(args: argparse.Namespace) -> int:
    from shopsimrl_core.runs._config import load_config
    from shopsimrl_core.runs._plan import build_plan

    config = load_config(args.config)
    plan = build_plan(config)
    described = plan.describe()
    if args.brief:
        described.pop("jobs")
    if not config.model.send_seed:
        sys.stderr.write("shopsimrl: warning: model.send_seed is false; sampling is not seed-controlled (runtime spec §22.10)\n")
    if plan.guarded:
        sys.stderr.write(
            f"shopsimrl: note: split {plan.split.name!r} is guarded; `run` needs --allow-test-split\n"
        )
    if args.probe_seed:
        import asyncio

        from shopsimrl_core.runs._seed_probe import probe_seed

        # The one network call `plan` makes, and only on request (§22.10); still writes nothing.
        probe = asyncio.run(probe_seed(plan))
        described["execution"] = {"seed_honoured": probe["seed_honoured"], "seed_probe": probe}
        if not probe["seed_honoured"]:
            sys.stderr.write("shopsimrl: warning: the model server did not reproduce a seeded request (seed_honoured: false)\n")
    _print_json(described)
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from shopsimrl_core.runs._config import load_config
    from shopsimrl_core.runs._evaluator import run_evaluation
    from shopsimrl_core.runs._progress import ConsoleProgress

    config = load_config(args.config)
    display = None
    if args.progress != "none":
        tty = {"auto": None, "bar": True, "lines": False}[args.progress]
        display = ConsoleProgress(sys.stderr, lines=sys.stdout, tty=tty, per_attempt_lines=not args.quiet)

    def on_start(plan: Any, store: Any, resumed: bool) -> None:
        sys.stdout.write(f"run={plan.run_dir} episodes={len(plan.jobs)} model={plan.config.model_id}\n")
        sys.stdout.flush()

    max_attempts = args.max_attempts
    if args.max_episode_retries is not None:
        if max_attempts is not None and max_attempts != args.max_episode_retries + 1:
            raise ShopSimRLError(
                "--max-attempts and --max-episode-retries disagree (attempts = retries + 1); pass only one", code="config-invalid"
            )
        max_attempts = args.max_episode_retries + 1
    result = run_evaluation(
        config,
        allow_test_split=args.allow_test_split,
        allow_test_rerun=args.allow_test_rerun,
        overwrite=args.overwrite,
        resume=args.resume,
        max_attempts=max_attempts,
        progress=display,
        opt_in_source="cli",
        on_start=on_start,
        only_failed=args.only_failed,
        probe_seed=args.probe_seed,
    )
    counts = result.counts
    reward = result.summary["primary"]["reward_mean"]
    sys.stdout.write(
        f"summary={result.summary_path} completed={counts['completed']}/{counts['requested']} failed={counts['failed']} "
        f"reward_mean={reward}\n"
    )
    return result.exit_code


def _cmd_summarize(args: argparse.Namespace) -> int:
    from shopsimrl_core.analysis._summary import summarize_run

    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise ShopSimRLError(f"{run_dir}: not a run directory; pass the folder holding traces.jsonl", code="run-dir-missing")
    _print_json(summarize_run(run_dir, requested=args.requested, write=not args.no_write))
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from shopsimrl_core._hashing import write_json_atomic
    from shopsimrl_core.analysis._stats import compare_runs

    result = compare_runs(
        args.run_a,
        args.run_b,
        bootstrap_samples=args.bootstrap_samples,
        bootstrap_seed=args.bootstrap_seed,
        confidence_level=args.confidence_level,
        rng=args.rng,
    )
    if args.output:
        write_json_atomic(args.output, result)
    _print_json(result)
    return 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 (got {value})")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 (got {value})")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every built-in and registered verb."""
    parser = argparse.ArgumentParser(prog="shopsimrl", description="Evaluate LLM shopping agents on ShopSimulator.")
    sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    p = sub.add_parser("plan", help="print the plan of an evaluation config as JSON (no network)")
    p.add_argument("config", help="evaluation YAML")
    p.add_argument("--brief", action="store_true", help="leave out the full job list (first_jobs stays)")
    p.add_argument("--probe-seed", action="store_true", help="send one seeded request twice and report execution.seed_honoured")
    p.set_defaults(handler=_cmd_plan)

    r = sub.add_parser("run", help="run or resume an evaluation, then write summary.json")
    r.add_argument("config", help="evaluation YAML")
    r.add_argument("--allow-test-split", action="store_true", help="opt in to running on a guarded test split (this invocation only)")
    r.add_argument("--allow-test-rerun", action="store_true", help="acknowledge that this checkpoint+skills already ran on the test split")
    r.add_argument("--overwrite", action="store_true", help="archive the existing run directory's files into superseded/ and start fresh")
    group = r.add_mutually_exclusive_group()
    group.add_argument("--resume", dest="resume", action="store_true", default=None, help="continue an existing run (overrides YAML)")
    group.add_argument("--no-resume", dest="resume", action="store_false", help="refuse a non-empty run directory (overrides YAML)")
    r.add_argument("--max-episode-retries", type=_non_negative, default=None, help="failed attempts retried per episode in this invocation")
    r.add_argument("--max-attempts", type=_positive, default=None, help="attempts per episode in this invocation (retries + 1)")
    r.add_argument("--only-failed", action="store_true", help="rerun only episodes whose latest record failed (no new episodes)")
    r.add_argument("--probe-seed", action="store_true", help="probe seed reproduction first; recorded in manifest.execution.seed_honoured")
    r.add_argument("--progress", choices=["auto", "bar", "lines", "none"], default="auto", help="progress display (auto: bar on a TTY)")
    r.add_argument("--quiet", action="store_true", help="no per-attempt lines")
    r.set_defaults(handler=_cmd_run)

    rf = sub.add_parser("retry-failed", help="rerun only episodes whose latest record failed (= run --only-failed)")
    rf.add_argument("config", help="evaluation YAML")
    rf.add_argument("--allow-test-split", action="store_true", help="opt in to a guarded test split (this invocation only)")
    rf.add_argument("--max-attempts", type=_positive, default=None, help="attempts per episode in this invocation")
    rf.add_argument("--progress", choices=["auto", "bar", "lines", "none"], default="auto")
    rf.add_argument("--quiet", action="store_true", help="no per-attempt lines")
    rf.set_defaults(handler=_cmd_run, only_failed=True, allow_test_rerun=False, overwrite=False, resume=True, max_episode_retries=None, probe_seed=False)

    s = sub.add_parser("summarize", help="rebuild summary.json from traces.jsonl and print it")
    s.add_argument("run_dir", help="run directory")
    s.add_argument("--requested", type=_non_negative, default=None, help="planned episode count (default: manifest jobs)")
    s.add_argument("--no-write", action="store_true", help="print only; do not write summary.json")
    s.set_defaults(handler=_cmd_summarize)

    c = sub.add_parser("compare", help="paired comparison of two runs (B minus A) with bootstrap intervals")
    c.add_argument("run_a")
    c.add_argument("run_b")
    c.add_argument("--output", default=None, help="also write the comparison JSON here")
    c.add_argument("--bootstrap-samples", type=_positive, default=10000)
    c.add_argument("--bootstrap-seed", type=int, default=20260901)
    c.add_argument("--confidence-level", type=float, default=0.95)
    c.add_argument("--rng", choices=["numpy", "cpython"], default="numpy")
    c.set_defaults(handler=_cmd_compare)

    for entry in _EXTENSIONS:
        module_name, _, function = entry.partition(":")
        getattr(importlib.import_module(module_name), function)(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``shopsimrl`` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except ShopSimRLError as exc:
        for line in str(exc).splitlines() or [exc.code]:
            if line.strip():
                sys.stderr.write(f"shopsimrl: error[{exc.code}]: {line.strip()}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("shopsimrl: interrupted; completed attempts are stored — rerun the same command to resume\n")
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

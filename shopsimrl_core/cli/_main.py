"""The ``shopsimrl`` command line (runtime-semantics §5.1).

Exit codes (docs/errors.md#exit-codes): 0 success; 1 the run finished but some planned episode is
not complete; 2 refusal (bad config or arguments, guarded split without opt-in, failed preflight,
fingerprint mismatch, locked run directory, …) with a one-line error per problem on stderr;
3 disk full; 4 file too large; 5 permission denied / read-only file system; 6 a directory where a
file belongs (or the reverse); 7 an input file that is not UTF-8; 8 any other OS error; 9 the
environment or model stayed unreachable longer than the outage budget; 130 interrupted (SIGINT);
143 terminated (SIGTERM). After 1, 9, 130 and 143 the same command resumes the run.

Other layers add verbs by appending ``"module:function"`` to ``_EXTENSIONS``; the function gets
the argparse sub-parsers object and registers its parser with ``set_defaults(handler=...)``, a
handler taking the parsed arguments and returning the exit code.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from shopsimrl_core._errors import ShopSimRLError
from shopsimrl_core.cli._arg_types import non_negative, positive, probability
from shopsimrl_core.cli._inputs import require_run_dir

__all__ = ["build_parser", "console_main", "main"]

# "module:function" entries that register extra sub-commands (see module docstring).
_EXTENSIONS: list[str] = [
    "shopsimrl_core.cli._skills_verbs:register_skills_cli",
    "shopsimrl_core.viewer._app:register_view_cli",
    "shopsimrl_core.cli._power_verbs:register_power_cli",
    "shopsimrl_core.cli._training_verbs:register_training_cli",
]


# Exit codes of errors that are not refusals (docs/errors.md#exit-codes); every other code exits 2.
EXIT_CODES: dict[str, int] = {
    "disk-full": 3,
    "file-too-large": 4,
    "permission-denied": 5,
    "read-only": 5,
    "input-unreadable": 5,
    "path-wrong-type": 6,
    "input-not-a-file": 6,
    "input-not-utf8": 7,
    "os-error": 8,
    "outage-budget-exhausted": 9,
}

_ERRNO_CODES: dict[int, tuple[str, str]] = {
    errno.ENOSPC: ("disk-full", "free space on that file system, then rerun (a torn last line is healed on resume)"),
    errno.EDQUOT: ("disk-full", "the disk quota is exhausted; free space, then rerun"),
    errno.EFBIG: ("file-too-large", "raise the file-size limit (ulimit -f) or use another experiment.output_dir"),
    errno.EACCES: ("permission-denied", "fix the permissions or choose a writable experiment.output_dir"),
    errno.EPERM: ("permission-denied", "fix the permissions or choose a writable experiment.output_dir"),
    errno.EROFS: ("read-only", "the file system is read-only; choose a writable experiment.output_dir"),
    errno.EISDIR: ("path-wrong-type", "a directory stands where a file belongs; move it away or fix the path"),
    errno.ENOTDIR: ("path-wrong-type", "a file stands where a directory belongs; move it away or fix the path"),
}


class _OneLineParser(argparse.ArgumentParser):
    """argparse with usage errors as one ``shopsimrl: error[usage]: ...`` line (exit 2)."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(
            f"shopsimrl: error[usage]: {self.prog}: {' '.join(message.split())}; see `{self.prog} --help`\n"
        )
        sys.exit(2)


def os_error_line(exc: OSError) -> tuple[str, str, int]:
    """``(code, message, exit code)`` for an OS error: the path, what happened and the fix, on one line."""
    code, fix = _ERRNO_CODES.get(exc.errno or -1, ("os-error", "check the path and the file system"))
    path = exc.filename if exc.filename is not None else "(path unknown)"
    extra = f" -> {exc.filename2}" if getattr(exc, "filename2", None) else ""
    reason = exc.strerror or type(exc).__name__
    return code, f"{path}{extra}: {reason}; {fix}", EXIT_CODES[code]


def _print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def _cmd_plan(args: argparse.Namespace) -> int:
    from shopsimrl_core.runs.config._config import load_config
    from shopsimrl_core.runs.planning._plan import build_plan

    config = load_config(args.config)
    plan = build_plan(config)
    described = plan.describe()
    if args.brief:
        described.pop("jobs")
    if not config.model.send_seed:
        sys.stderr.write(
            "shopsimrl: warning: model.send_seed is false; sampling is not seed-controlled (runtime-semantics §22.10)\n"
        )
    if plan.guarded:
        sys.stderr.write(f"shopsimrl: note: split {plan.split.name!r} is guarded; `run` needs --allow-test-split\n")
    if args.probe_seed:
        import asyncio

        from shopsimrl_core.runs.endpoints._seed_probe import probe_seed

        # The one network call `plan` makes, and only on request (§22.10); still writes nothing.
        probe = asyncio.run(probe_seed(plan))
        described["execution"] = {"seed_honoured": probe["seed_honoured"], "seed_probe": probe}
        if not probe["seed_honoured"]:
            sys.stderr.write(
                "shopsimrl: warning: the model server did not reproduce a seeded request (seed_honoured: false)\n"
            )
    _print_json(described)
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from shopsimrl_core.runs.config._config import load_config
    from shopsimrl_core.runs.execution._evaluation_options import EvaluationOptions
    from shopsimrl_core.runs.execution._evaluator import run_evaluation
    from shopsimrl_core.runs.execution._progress import ConsoleProgress

    config = load_config(args.config)
    display: Any = _notices_only
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
                "--max-attempts and --max-episode-retries disagree (attempts = retries + 1); pass only one",
                code="config-invalid",
            )
        max_attempts = args.max_episode_retries + 1
    options = EvaluationOptions(
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
    result = run_evaluation(config, options)  # on uvloop, with a tuned collector (runs/execution/_loop.py)
    counts = result.counts
    sys.stdout.write(
        f"summary={result.summary_path} completed={counts.completed}/{counts.requested} "
        f"failed={counts.failed} "
        f"reward_mean={result.summary.primary.reward_mean}\n"
    )
    return result.exit_code


def _single_blas_thread() -> None:
    # numpy (the bootstrap's generator) loads OpenBLAS, which starts a worker thread per core that
    # spins while waiting for work: 0.15 s of CPU per process for nothing, since no verb does linear
    # algebra (importing numpy and one bootstrap: 0.28 s CPU, 0.14 s with one thread). Set before
    # numpy is imported; a value the user exported wins. Only this CLI process.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def _no_pydantic_plugin_scan() -> None:
    # pydantic looks for plugins (entry points of the "pydantic" group) when it builds its first
    # validator, reading one file per installed distribution: 4–6 ms of a one-episode run's CPU in a
    # Dagster-sized environment (211 of them), for plugins no verb uses. A value the user exported
    # wins (docs/config.md#environment-variables).
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")


def _notices_only(event: Any) -> None:
    # `--progress none` still says when the run waits for slots, rides out an outage or heals leases.
    if getattr(event, "kind", None) == "notice":
        sys.stderr.write(f"shopsimrl: {event.message}\n")
        sys.stderr.flush()


def _cmd_summarize(args: argparse.Namespace) -> int:
    from shopsimrl_core.analysis._summary import summarize_run

    run_dir = require_run_dir(args.run_dir)
    summary = summarize_run(run_dir, requested=args.requested, write=not args.no_write)
    if args.categories:
        from shopsimrl_core.analysis._categories import category_intervals

        _print_json({name: row.to_json() for name, row in category_intervals(summary, run_dir).items()})
    elif args.metrics:
        from shopsimrl_core.analysis._metrics import episode_metrics

        _print_json(episode_metrics(run_dir))
    else:
        _print_json(summary.to_json())
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from shopsimrl_core._hashing import write_json_atomic
    from shopsimrl_core.analysis._comparison import compare_runs

    for raw in (args.run_a, args.run_b):
        require_run_dir(raw)
    if args.output and Path(args.output).is_dir():
        raise ShopSimRLError(
            f"{args.output}: --output is a directory; pass a file path for the comparison JSON", code="path-wrong-type"
        )
    result = compare_runs(
        args.run_a,
        args.run_b,
        bootstrap_samples=args.bootstrap_samples,
        bootstrap_seed=args.bootstrap_seed,
        confidence_level=args.confidence_level,
        rng=args.rng,
        intended=tuple(args.intended),
    )
    document = result.to_json()
    if args.output:
        write_json_atomic(args.output, document)
    _print_json(document)
    return 0


def build_parser(verb: str | None = None) -> argparse.ArgumentParser:
    """The argument parser with every built-in and registered verb.

    When *verb* names a built-in verb, the registered (extension) verbs are left out: importing
    them costs every `shopsimrl run` start-up time it does not use.
    """
    parser = _OneLineParser(prog="shopsimrl", description="Evaluate LLM shopping agents on ShopSimulator.")
    sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    p = sub.add_parser("plan", help="print the plan of an evaluation config as JSON (no network)")
    p.add_argument("config", help="evaluation YAML")
    p.add_argument("--brief", action="store_true", help="leave out the full job list (first_jobs stays)")
    p.add_argument(
        "--probe-seed", action="store_true", help="send one seeded request twice and report execution.seed_honoured"
    )
    p.set_defaults(handler=_cmd_plan)

    r = sub.add_parser("run", help="run or resume an evaluation, then write summary.json")
    r.add_argument("config", help="evaluation YAML")
    r.add_argument(
        "--allow-test-split",
        action="store_true",
        help="opt in to running on a guarded test split (this invocation only)",
    )
    r.add_argument(
        "--allow-test-rerun",
        action="store_true",
        help="acknowledge that this checkpoint+skills already ran on the test split",
    )
    r.add_argument(
        "--overwrite",
        action="store_true",
        help="archive the existing run directory's files into superseded/ and start fresh",
    )
    group = r.add_mutually_exclusive_group()
    group.add_argument(
        "--resume", dest="resume", action="store_true", default=None, help="continue an existing run (overrides YAML)"
    )
    group.add_argument(
        "--no-resume", dest="resume", action="store_false", help="refuse a non-empty run directory (overrides YAML)"
    )
    r.add_argument(
        "--max-episode-retries",
        type=non_negative,
        default=None,
        help="failed attempts retried per episode in this invocation",
    )
    r.add_argument(
        "--max-attempts", type=positive, default=None, help="attempts per episode in this invocation (retries + 1)"
    )
    r.add_argument(
        "--only-failed", action="store_true", help="rerun only episodes whose latest record failed (no new episodes)"
    )
    r.add_argument(
        "--probe-seed",
        action="store_true",
        help="probe seed reproduction first; recorded in manifest.execution.seed_honoured",
    )
    r.add_argument(
        "--progress",
        choices=["auto", "bar", "lines", "none"],
        default="auto",
        help="progress display (auto: bar on a TTY)",
    )
    r.add_argument("--quiet", action="store_true", help="no per-attempt lines")
    r.set_defaults(handler=_cmd_run)

    rf = sub.add_parser("retry-failed", help="rerun only episodes whose latest record failed (= run --only-failed)")
    rf.add_argument("config", help="evaluation YAML")
    rf.add_argument(
        "--allow-test-split", action="store_true", help="opt in to a guarded test split (this invocation only)"
    )
    rf.add_argument("--max-attempts", type=positive, default=None, help="attempts per episode in this invocation")
    rf.add_argument("--progress", choices=["auto", "bar", "lines", "none"], default="auto")
    rf.add_argument("--quiet", action="store_true", help="no per-attempt lines")
    rf.set_defaults(
        handler=_cmd_run,
        only_failed=True,
        allow_test_rerun=False,
        overwrite=False,
        resume=True,
        max_episode_retries=None,
        probe_seed=False,
    )

    s = sub.add_parser("summarize", help="rebuild summary.json from traces.jsonl and print it")
    s.add_argument("run_dir", help="run directory")
    s.add_argument(
        "--requested", type=non_negative, default=None, help="planned episode count (default: manifest jobs)"
    )
    s.add_argument("--no-write", action="store_true", help="print only; do not write summary.json")
    shown = s.add_mutually_exclusive_group()
    shown.add_argument(
        "--categories",
        action="store_true",
        help="print the per-category rows with their intervals, tasks and small_n flag instead of the summary",
    )
    shown.add_argument(
        "--metrics",
        action="store_true",
        help="print the per-episode metrics (episode/_metrics.py) over the run's completed episodes instead",
    )
    s.set_defaults(handler=_cmd_summarize)

    c = sub.add_parser("compare", help="paired comparison of two runs (B minus A) with bootstrap intervals")
    c.add_argument("run_a")
    c.add_argument("run_b")
    c.add_argument("--output", default=None, help="also write the comparison JSON here")
    c.add_argument("--bootstrap-samples", type=positive, default=10000)
    c.add_argument("--bootstrap-seed", type=int, default=20260901)
    c.add_argument(
        "--confidence-level", type=probability, default=0.95, help="interval level, between 0 and 1 (default 0.95)"
    )
    c.add_argument("--rng", choices=["numpy", "cpython"], default="numpy")
    c.add_argument("--intended", action="append", default=[], metavar="FIELD",
                   choices=["task_split", "jobs", "environment", "runtime", "prompt", "skills", "model"],
                   help="a plan field whose difference is intended (repeatable), e.g. skills for bare vs skills")
    c.set_defaults(handler=_cmd_compare)

    if verb is not None and verb in sub.choices:
        return parser
    for entry in _EXTENSIONS:
        module_name, _, function = entry.partition(":")
        getattr(importlib.import_module(module_name), function)(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``shopsimrl`` console script; returns the exit code."""
    _single_blas_thread()
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except ShopSimRLError as exc:
        for line in str(exc).splitlines() or [exc.code]:
            if line.strip():
                sys.stderr.write(f"shopsimrl: error[{exc.code}]: {line.strip()}\n")
        return EXIT_CODES.get(exc.code, 2)
    except OSError as exc:
        code, line, exit_code = os_error_line(exc)
        sys.stderr.write(f"shopsimrl: error[{code}]: {line}\n")
        return exit_code
    except UnicodeDecodeError as exc:
        sys.stderr.write(
            f"shopsimrl: error[input-not-utf8]: an input file is not UTF-8 ({exc.reason}); save it as UTF-8\n"
        )
        return EXIT_CODES["input-not-utf8"]
    except KeyboardInterrupt as exc:
        from shopsimrl_core.runs.execution._evaluation_options import RunTerminated

        terminated = isinstance(exc, RunTerminated)
        sys.stderr.write(
            f"shopsimrl: {'terminated (SIGTERM)' if terminated else 'interrupted'}; completed attempts are stored — "
            "rerun the same command to resume\n"
        )
        return 143 if terminated else 130


def console_main() -> NoReturn:
    """The ``shopsimrl`` program: :func:`main` on ``sys.argv`` in a process of its own, then exit with its code.

    The collector is set for a process that runs one command (``cli/_collector.py``); calling
    :func:`main` in a long-lived process leaves the collector alone.
    """
    from shopsimrl_core.cli._collector import one_shot_process_collector

    _no_pydantic_plugin_scan()
    with one_shot_process_collector():
        code = main()
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    console_main()

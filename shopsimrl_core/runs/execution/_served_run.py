"""A run whose config has a ``serve`` section: refusals first, then the server, then the run, then the server stopped.

The run's own refusals that need no server (the test-split guard, a missing API key variable, weights
that do not exist) come before the launch, so a refused run starts nothing and writes nothing, and a
misconfigured test run never costs a model load. A run that finds every planned episode complete
(a re-materialization with nothing left to do) starts no server either: it only writes its summary.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Coroutine
from typing import Any

from shopsimrl_core._errors import ShopSimRLError
from shopsimrl_core.runs.config._config import EvalConfig
from shopsimrl_core.runs.execution._evaluation_options import EvaluationOptions, RunResult
from shopsimrl_core.runs.execution._loop import run_coroutine
from shopsimrl_core.runs.execution._progress import notice_sink
from shopsimrl_core.runs.execution._run_clients import _check_api_key
from shopsimrl_core.runs.execution._signals import _with_signals
from shopsimrl_core.runs.planning._plan import EvalPlan, build_plan
from shopsimrl_core.runs.storage._ledger import check_test_access
from shopsimrl_core.runs.storage._store import RunStore
from shopsimrl_core.serving._launch import launched_server

__all__ = ["run_served"]


def run_served(
    config: EvalConfig,
    options: EvaluationOptions,
    evaluate: Callable[[EvalConfig, EvaluationOptions], Coroutine[Any, Any, RunResult]],
) -> RunResult:
    """Launch the checkpoint's server of *config*, run the evaluation against it, stop the server.

    *evaluate* is ``arun_evaluation``, handed in by ``run_evaluation`` so that this module does not
    import the evaluator back (tests/core/test_import_cycles.py).

    Same promises and errors as ``run_evaluation``, plus those of ``launched_server``
    (``server-start-failed``, ``gpu-pool-busy``); the server's launch and stop are ``notice`` events
    (status ``serving``) of *options*' progress listener.
    """
    plan = build_plan(config)
    check_test_access(plan, allow_test_split=options.allow_test_split, allow_test_rerun=options.allow_test_rerun)
    _check_api_key(config)
    if _nothing_left(plan, options):
        if options.progress is not None:
            notice_sink(options.progress, status="serving")(
                f"nothing left to run: all {len(plan.jobs)} planned episodes are complete; no inference server started"
            )
        # No episode is played, so no model call is made: the run only re-reads its traces and writes its summary.
        quiet = dataclasses.replace(options, preflight=False)
        return run_coroutine(_with_signals(evaluate(config, quiet)))
    with launched_server(config, notice_sink(options.progress, status="serving")) as server:
        served = config.model_copy(update={"model": config.model.model_copy(update={"base_url": server.base_url})})
        served._source = config._source
        return run_coroutine(_with_signals(evaluate(served, options)))


def _nothing_left(plan: EvalPlan, options: EvaluationOptions) -> bool:
    """Whether the run directory already holds every planned episode complete (read only, no lock taken).

    Anything unusual (a new or overwritten run, a retry of failures, a gate's plan, a directory the run
    would refuse) is "something left": the ordinary path decides and reports it.
    """
    if options.overwrite or options.only_failed or options.skill_provider is not None or options.plan_blocks:
        return False
    resume = plan.config.experiment.resume if options.resume is None else options.resume
    store = RunStore(plan.run_dir)
    try:
        if store.check_resumable(plan.semantic, plan.fingerprint, resume=resume) != "resume":
            return False
        index = store.index(persist=False)
    except (ShopSimRLError, OSError, ValueError):
        return False
    return all(index.is_complete(job.episode_id) for job in plan.jobs)

"""A run whose config has a ``serve`` section: refusals first, then the server, then the run, then the server stopped.

The run's own refusals that need no server (the test-split guard, a missing API key variable) come
before the launch, so a refused run starts nothing and writes nothing, and a misconfigured test run
never costs a model load.
"""

from __future__ import annotations

from shopsimrl_core.runs.config._config import EvalConfig
from shopsimrl_core.runs.execution._evaluation_options import EvaluationOptions, RunResult
from shopsimrl_core.runs.execution._evaluator import arun_evaluation
from shopsimrl_core.runs.execution._loop import run_coroutine
from shopsimrl_core.runs.execution._progress import notice_sink
from shopsimrl_core.runs.execution._run_clients import _check_api_key
from shopsimrl_core.runs.execution._signals import _with_signals
from shopsimrl_core.runs.planning._plan import build_plan
from shopsimrl_core.runs.storage._ledger import check_test_access
from shopsimrl_core.serving._launch import launched_server

__all__ = ["run_served"]


def run_served(config: EvalConfig, options: EvaluationOptions) -> RunResult:
    """Launch the checkpoint's server of *config*, run the evaluation against it, stop the server.

    Same promises and errors as ``run_evaluation``, plus those of ``launched_server``
    (``server-start-failed``, ``gpu-pool-busy``); the server's launch and stop are ``notice`` events
    (status ``serving``) of *options*' progress listener.
    """
    check_test_access(
        build_plan(config), allow_test_split=options.allow_test_split, allow_test_rerun=options.allow_test_rerun
    )
    _check_api_key(config)
    with launched_server(config, notice_sink(options.progress, status="serving")) as server:
        served = config.model_copy(update={"model": config.model.model_copy(update={"base_url": server.base_url})})
        served._source = config._source
        return run_coroutine(_with_signals(arun_evaluation(served, options)))

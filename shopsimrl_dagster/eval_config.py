"""Turn (suite, checkpoint, resources) into a core evaluation config file.

The pipeline never hands the core an in-memory config: it writes an ordinary evaluation YAML
(runtime-semantics §3.1 keys) to ``RunStorage.eval_config_path(suite, checkpoint)`` and loads it with
``shopsimrl_core.load_config``. So every rollout the pipeline starts can be repeated by hand with
``shopsimrl run <that file>``, and the core's validation and defaults apply unchanged. Values come
straight from the resources (whose fields are the pipeline settings' keys); there is no
intermediate copy of the settings.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from shopsimrl_core import write_text_atomic

if TYPE_CHECKING:
    from .defs.resources import InferenceEndpoint, RunStorage, ShopSimulatorEnvironment
    from .registry import Checkpoint
    from .settings import EvaluationSuite

__all__ = ["eval_config_document", "write_eval_config"]


def eval_config_document(
    *,
    run_storage: RunStorage,
    suite_name: str,
    suite: EvaluationSuite,
    checkpoint: Checkpoint,
    inference: InferenceEndpoint,
    environment: ShopSimulatorEnvironment,
    split_file: Path,
    prompt: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The evaluation config mapping (runtime-semantics §3.1 keys) of *checkpoint* under *suite*.

    The run directory is ``run_storage.run_dir(suite_name, checkpoint_id)`` (experiment name =
    checkpoint id); the ledger is the project-level one of ``run_storage``.
    """
    run_dir = run_storage.run_dir(suite_name, checkpoint.checkpoint_id)
    document: dict[str, Any] = {
        "experiment": {
            "name": run_dir.name,
            "output_dir": str(run_dir.parent),
            "seed": suite.seed,
            "concurrency": inference.max_in_flight,
            "resume": True,
            # One project-level ledger for every suite (runtime-semantics §22.6), not one per suite folder.
            "test_access_ledger": str(run_storage.ledger_path()),
        },
        "tasks": {
            "split_file": str(split_file),
            "split": suite.split,
            "sample_size": suite.sample_size,
            "repeats": suite.repeats,
        },
        "environment": {
            "base_url": environment.base_url,
            "timeout": environment.timeout_s,
            "persona": environment.persona,
            # every suite's runs share the environment: a killed run's leases are freed by the next of any
            # suite (docs/runs.md#leases)
            "shared_runs_root": str(run_storage.root_path),
        },
        "runtime": {"max_steps": suite.max_steps},
        "skills": {"path": suite.skills, "max_skills": suite.max_skills},
        # The inference section's core keys as given, the suite's sampling over them, the checkpoint's own.
        "model": inference.model_section(checkpoint, dict(suite.sampling)),
    }
    if prompt:
        document["prompt"] = dict(prompt)
    serve = inference.serve_section(checkpoint)
    if serve is not None:
        # The core launches the server for the run; GPU locks and server records live under the runs root
        # unless the settings name another folder, so every suite's runs share one pool.
        document["serve"] = {"state_dir": str(run_storage.servers_dir()), **serve}
    # Replicas and extra servers (docs/scaling.md) only when set: other configs stay as they were.
    if environment.base_urls:
        document["environment"]["base_urls"] = list(environment.base_urls)
    if environment.identity is not None:
        document["environment"]["identity"] = environment.identity
    return document


def write_eval_config(**target: Any) -> Path:
    """Write the config of :func:`eval_config_document` (same keyword arguments) and return its path.

    Overwrites atomically: the file is derived from the settings, never edited by hand.
    """
    document = eval_config_document(**target)
    path: Path = target["run_storage"].eval_config_path(target["suite_name"], target["checkpoint"].checkpoint_id)
    text = "# Written by the shopsimrl Dagster pipeline; rerun by hand with `shopsimrl run <this file>`.\n"
    text += yaml.safe_dump(document, sort_keys=False, allow_unicode=True)
    return write_text_atomic(path, text)

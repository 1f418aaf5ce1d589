"""shopsimrl_pipes — the trainer's side of a training round (Dagster Pipes), importable without Dagster.

A trainer (an adapter, or a script) reports through :func:`open_trainer_report`::

    from shopsimrl_pipes import open_trainer_report

    with open_trainer_report() as report:
        config = report.extras["training_config"]          # the round's training YAML
        ...
        report.step(step, reward=0.4, success=0.4, frontier_share=0.5, tokens_per_s=812.0)
        report.checkpoint(weights_path, step)              # registry entry → the sensor evaluates it
        report.finish()

It needs only ``dagster-pipes`` (no ``dagster``): ``shopsimrl_core`` must never import Dagster, and a
trainer's environment stays lean. ``python -m shopsimrl_pipes.group`` is the process-group supervisor
``round_training`` starts the trainer under (docs/pipeline.md, "Training rounds").
"""

from ._report import EXTRAS_ENV, TrainerReport, checkpoint_id_for, open_trainer_report

__all__ = ["EXTRAS_ENV", "TrainerReport", "checkpoint_id_for", "open_trainer_report"]

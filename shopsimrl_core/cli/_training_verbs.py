"""The ``shopsimrl training`` verbs: ``preflight`` before a trainer allocates GPUs, ``summarize`` after a round.

Registered through ``cli._main._EXTENSIONS``; thin shells over ``training._preflight.training_preflight`` and
``training._summary.summarize_training`` (docs/training.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["register_training_cli"]


def _cmd_preflight(args: argparse.Namespace) -> int:
    from shopsimrl_core.training._preflight import training_preflight

    report = training_preflight(args.config)
    for line in report.checked:
        print(f"ok: {line}")
    for line in report.problems:
        sys.stderr.write(f"shopsimrl: error[training-preflight]: {line}\n")
    return 0 if report.ok else 2


def _cmd_summarize(args: argparse.Namespace) -> int:
    from shopsimrl_core.training._summary import summarize_training

    reports = summarize_training(args.dir)
    print(json.dumps(reports if len(reports) > 1 else reports[0], ensure_ascii=False, indent=2))
    return 0


def register_training_cli(sub: Any) -> None:
    """Add ``training preflight`` and ``training summarize`` to the ``shopsimrl`` sub-parsers."""
    training = sub.add_parser("training", help="training with the runtime that evaluates: preflight, summarize")
    verbs = training.add_subparsers(dest="training_verb", required=True, metavar="VERB")
    p = verbs.add_parser("preflight", help="check a training config before the trainer allocates GPUs (one line per "
                         "problem, exit 2 on any)")
    p.add_argument("config", help="the training YAML (docs/config.md#training)")
    p.set_defaults(handler=_cmd_preflight)
    s = verbs.add_parser("summarize", help="per round: groups, success histogram, frontier share, triage classes, "
                         "abort rate, tokens/s, samples per episode")
    s.add_argument("dir", help="a training out_dir (or a folder of them)")
    s.set_defaults(handler=_cmd_summarize)

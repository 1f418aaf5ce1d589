"""The ``shopsimrl power`` verb: tasks × repeats needed to detect a difference, or the MDE of a design.

Registered through ``cli._main._EXTENSIONS``; a thin shell over ``analysis._power_report.power_report``
that prints its JSON report on stdout (docs/statistics.md#power-and-sample-size).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from shopsimrl_core._errors import ConfigError
from shopsimrl_core.cli._arg_types import positive, positive_float, probability

__all__ = ["register_power_cli"]


def _cmd_power(args: argparse.Namespace) -> int:
    from shopsimrl_core._hashing import read_json_file
    from shopsimrl_core.analysis._power_report import power_report

    if Path(args.source).is_file():
        # a file that is not JSON at all: one line here (the report parses only what is JSON)
        fix = "pass comparison.json from `shopsimrl compare --output`"
        try:
            read_json_file(args.source, "comparison", fix=fix)
        except ConfigError as exc:
            raise ConfigError(f"{exc}; {fix}", code="document-invalid") from None
    report = power_report(
        args.source,
        metric=args.metric,
        detect=args.detect,
        tasks=args.tasks,
        repeats=args.repeats,
        alpha=args.alpha,
        power=args.power,
    )
    print(json.dumps(report, ensure_ascii=False, indent=2))
    return 0


def register_power_cli(sub: Any) -> None:
    """Add ``power`` to the ``shopsimrl`` sub-parsers."""
    p = sub.add_parser(
        "power",
        help="tasks × repeats needed to detect a difference (and the MDE of a design) from a run or comparison",
        description="From a comparison JSON (paired variance) or a run directory (conservative, two "
        "independent checkpoints): the minimum detectable difference of the observed design, of "
        "--tasks N at each --repeats R, and the tasks needed to detect --detect D at each repeats.",
    )
    p.add_argument("source", help="comparison JSON (`shopsimrl compare --output`) or a run directory")
    p.add_argument("--metric", default="reward", help="metric name: reward, r_success, … (default reward)")
    p.add_argument("--detect", type=positive_float, default=None, metavar="D",
                   help="difference to detect in the metric's unit, e.g. 0.03 for 3 points of success rate")
    p.add_argument("--tasks", type=positive, default=None, metavar="N", help="MDE of a design with N tasks")
    p.add_argument("--repeats", type=positive, action="append", default=[], metavar="R",
                   help="repeats per task to plan for (repeatable; default 1, 2, 4, 8 for --detect)")
    p.add_argument("--alpha", type=probability, default=0.05, help="two-sided test level (default 0.05)")
    p.add_argument("--power", type=probability, default=0.8, help="power (default 0.8)")
    p.set_defaults(handler=_cmd_power)

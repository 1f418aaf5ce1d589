"""``python -m shopsim_sandbox.policy``: measure the baseline policy's success rate on a split."""

from __future__ import annotations

import asyncio
import json

from shopsim_sandbox.policy.episode import measure_success


def main(argv: list[str] | None = None) -> int:
    """Play every task of a split once and print the success summary as JSON; returns the exit code."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m shopsim_sandbox.policy",
                                     description="Measure the baseline policy's success rate on a split.")
    parser.add_argument("--env-url", required=True, help="environment base URL, e.g. http://127.0.0.1:5700")
    parser.add_argument("--policy-url", required=True, help="policy base URL ending in /v1")
    parser.add_argument("--split-file", required=True, help="persona_splits JSON file")
    parser.add_argument("--split", default="val", help="split name (default: val)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        with open(args.split_file, encoding="utf-8") as handle:
            splits = json.load(handle)
    except (OSError, ValueError) as exc:
        parser.error(f"{args.split_file}: cannot read the split file ({exc}); pass a persona_splits JSON file")
    try:
        task_ids = splits["splits"][args.split]["task_ids"]
    except (KeyError, TypeError):
        parser.error(f"{args.split_file}: no splits.{args.split}.task_ids; pass --split train, val or test")
    print(json.dumps(asyncio.run(measure_success(args.env_url, args.policy_url, task_ids, seed=args.seed))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``python -m shopsim_sandbox.policy``: serve the baseline policy alone, or measure its success rate.

    python -m shopsim_sandbox.policy serve [--checkpoint FILE] [--port 5800] [--host 127.0.0.1]
                                           [--served-model-name NAME] [--seed S] [--latency-ms MS]
                                           [--ready-file PATH] [--log-level LEVEL] [--loop auto|asyncio|uvloop]
                                           [--load-time S] [--enable-lora --max-lora-rank R]
    python -m shopsim_sandbox.policy [measure] --env-url URL --policy-url URL/v1 --split-file FILE
                                           [--split val] [--seed S] [--model NAME]

``serve`` starts the policy the way a vLLM checkpoint is started (``vllm serve WEIGHTS --port N
--served-model-name NAME``): the checkpoint file (``shopsim_sandbox.policy.checkpoint``) sets its lapse
rates. It prints ``serving on http://HOST:PORT/v1`` on stdout once bound (``--port 0`` = any free
port), writes ``{"port": PORT}`` to ``--ready-file`` once accepting connections, and stops on SIGTERM.
``--load-time S`` sleeps S seconds before binding, like a real server loading its weights (the
time-to-results benchmark stands it in for vLLM). ``--enable-lora`` with ``--max-lora-rank R`` and the
environment variable ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` add vLLM's runtime LoRA endpoints
(``/v1/load_lora_adapter``, ``/v1/unload_lora_adapter``; adapters: ``shopsim_sandbox.policy.adapter``).
Without a subcommand the flags are ``measure``'s (the original invocation).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

from shopsim_sandbox.policy.decide import SERVED_MODEL

_PROG = "python -m shopsim_sandbox.policy"


def main(argv: list[str] | None = None) -> int:
    """Run ``serve`` or ``measure`` (the default when the first argument is a flag); returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["serve"]:
        return _serve_main(args[1:])
    if args[:1] == ["measure"]:
        return _measure_main(args[1:], f"{_PROG} measure")
    return _measure_main(args, _PROG)


def _measure_main(argv: list[str], prog: str) -> int:
    """Play every task of a split once and print the success summary as JSON."""
    from shopsim_sandbox.policy.episode import measure_success

    parser = argparse.ArgumentParser(
        prog=prog,
        description="Measure the baseline policy's success rate on a split "
        f"(`{_PROG} serve --help` to serve the policy alone).",
    )
    parser.add_argument("--env-url", required=True, help="environment base URL, e.g. http://127.0.0.1:5700")
    parser.add_argument("--policy-url", required=True, help="policy base URL ending in /v1")
    parser.add_argument("--split-file", required=True, help="persona_splits JSON file")
    parser.add_argument("--split", default="val", help="split name (default: val)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default=SERVED_MODEL, help=f"served model name to request (default {SERVED_MODEL})")
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
    summary = asyncio.run(
        measure_success(args.env_url, args.policy_url, task_ids, seed=args.seed, model_name=args.model)
    )
    print(json.dumps(summary))
    return 0


def _serve_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"{_PROG} serve",
        description="Serve the baseline policy alone as an OpenAI-compatible endpoint, started on a checkpoint file "
        "like a vLLM checkpoint.",
    )
    parser.add_argument(
        "--checkpoint",
        default=None,
        help="policy checkpoint file (shopsim-policy-checkpoint-v1 JSON: its lapse rates); default: built-in rates",
    )
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=5800, help="port (default 5800; 0 = any free port)")
    parser.add_argument(
        "--served-model-name",
        default=SERVED_MODEL,
        help=f"model name listed by GET /v1/models and accepted in requests (default {SERVED_MODEL})",
    )
    parser.add_argument("--seed", type=int, default=0, help="policy seed (default 0)")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="added to every completion call (default 0)")
    parser.add_argument("--ready-file", default=None, help='write {"port": PORT} as JSON here once serving')
    parser.add_argument("--log-level", default="warning", help="uvicorn log level (default warning)")
    parser.add_argument("--load-time", type=float, default=0.0,
                        help="seconds to sleep before binding, standing for a model load (default 0)")
    parser.add_argument("--enable-lora", action="store_true",
                        help="serve LoRA adapters (loaded at runtime with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)")
    parser.add_argument("--max-lora-rank", type=int, default=16,
                        help="largest adapter rank accepted (default 16, vLLM's)")
    parser.add_argument(
        "--loop",
        choices=("auto", "asyncio", "uvloop"),
        default="auto",
        help="event loop (default auto: uvloop when installed, else asyncio)",
    )
    return parser


def _serve_main(argv: list[str]) -> int:
    """Serve the policy until SIGTERM; bad input is one line on stderr and exit code 2."""
    from shopsim_sandbox.cli import loop_factory, serve_apps
    from shopsim_sandbox.policy.checkpoint import load_policy_checkpoint
    from shopsim_sandbox.policy.decide import DEFAULT_LAPSE_RATES
    from shopsim_sandbox.policy.server import build_policy_app

    parser = _serve_parser()
    args = parser.parse_args(argv)
    try:
        if not 0 <= args.port <= 65535:
            raise ValueError(f"--port: must be in 0..65535 (got {args.port}); 0 picks a free port")
        if not args.latency_ms >= 0:
            raise ValueError(f"--latency-ms: must be >= 0 (got {args.latency_ms})")
        if not args.served_model_name.strip():
            raise ValueError("--served-model-name: must not be empty")
        if not args.load_time >= 0:
            raise ValueError(f"--load-time: must be >= 0 seconds (got {args.load_time})")
        if args.max_lora_rank < 1:
            raise ValueError(f"--max-lora-rank: must be >= 1 (got {args.max_lora_rank})")
        checkpoint = load_policy_checkpoint(args.checkpoint) if args.checkpoint is not None else None
        app = build_policy_app(
            seed=args.seed,
            latency_ms=args.latency_ms,
            model_name=args.served_model_name,
            lapse_rates=checkpoint.lapses if checkpoint is not None else DEFAULT_LAPSE_RATES,
            model_root=args.checkpoint,
            max_lora_rank=args.max_lora_rank if args.enable_lora else None,
            # vLLM registers its runtime LoRA endpoints only with this switch in its environment
            runtime_lora=os.environ.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "").lower() in ("1", "true"),
        )
        if args.load_time > 0:
            time.sleep(args.load_time)  # the weights' load: nothing listens yet

        def announce(ports: dict[str, int]) -> None:
            print(f"serving on http://{args.host}:{ports['port']}/v1", flush=True)

        with asyncio.Runner(loop_factory=loop_factory(args.loop)) as runner:
            runner.run(serve_apps([("port", app, args.port)], host=args.host, log_level=args.log_level,
                                  ready_file=args.ready_file, announce=announce))
        return 0
    except (OSError, ValueError) as exc:  # CheckpointError is a ValueError
        print(f"{_PROG} serve: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`shopsim-sandbox`: serve the sandbox environment (+ baseline policy) or write a synthetic catalog.

    shopsim-sandbox serve [--port 5700] [--policy-port 5800] [--slots N] [--catalog-size N] [--seed S]
                          [--catalog FILE|example] [--no-policy] [--policy-checkpoint FILE]
                          [--env-latency-ms MS] [fault flags] [--server-timing] [--loop auto|asyncio|uvloop]
    shopsim-sandbox catalog --out DIR [--size N] [--seed S]

`--port`/`--slots` default to the env vars SHOPSIM_PORT (5700) and SHOPSIM_ENV_SLOTS (20), like the
real server. The policy runs in the same process on its own port (`--policy-port`, default 5800);
`python -m shopsim_sandbox.policy serve` serves it alone. Both start their uvicorn servers with
`serve_apps`.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import json
import os
import socket
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shopsim_sandbox.catalog import EXAMPLE_CATALOG_PATH, Catalog, CatalogError, load_catalog, load_records
from shopsim_sandbox.faults import add_fault_arguments, fault_config_from_args
from shopsim_sandbox.synthetic import (
    DEFAULT_CATALOG_SIZE,
    DEFAULT_SEED,
    build_split_file,
    catalog_json,
    generate_catalog,
    split_file_json,
)
from shopsim_sandbox.versions import DEFAULT_PORT, DEFAULT_SLOTS

if TYPE_CHECKING:
    from shopsim_sandbox.policy.checkpoint import PolicyCheckpoint

_GRACE_S = 1


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(
            f"shopsim-sandbox: environment variable {name}={raw!r} is not an integer; unset it or set a number"
        ) from None


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_catalog(out: Path, size: int, seed: int) -> tuple[Path, Path]:
    """Generate the synthetic catalog and write `catalog.json` + `persona_splits.json` into `out`."""
    records = generate_catalog(size, seed)
    catalog_path, split_path = out / "catalog.json", out / "persona_splits.json"
    _write_atomic(catalog_path, catalog_json(records))
    _write_atomic(split_path, split_file_json(build_split_file(records, seed)))
    return catalog_path, split_path


def _load_served_catalog(args: argparse.Namespace) -> tuple[Catalog, str]:
    # The SHA-256 is of the catalog file's bytes (for a generated catalog: of the file `catalog`
    # would write), i.e. what a split file built from it records as source.cleaned_archive_sha256.
    if args.catalog:
        path = Path(EXAMPLE_CATALOG_PATH if args.catalog == "example" else args.catalog)
        catalog = load_catalog(path)
        return catalog, hashlib.sha256(path.read_bytes()).hexdigest()
    records = generate_catalog(args.catalog_size, args.seed)
    catalog = load_records(records, source=f"synthetic(size={args.catalog_size}, seed={args.seed})")
    return catalog, hashlib.sha256(catalog_json(records).encode()).hexdigest()


def _bound_socket(host: str, port: int) -> socket.socket:
    # proto must be IPPROTO_TCP: asyncio only sets TCP_NODELAY on accepted sockets of that proto, and
    # without it every response pays a ~40 ms Nagle/delayed-ACK stall (headers and body are two writes).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


async def serve_apps(
    apps: Sequence[tuple[str, Any, int]],
    *,
    host: str,
    log_level: str = "warning",
    ready_file: str | Path | None = None,
    announce: Callable[[dict[str, int]], None] | None = None,
) -> None:
    """Serve each ``(name, asgi_app, port)`` with its own uvicorn server on one event loop, until SIGTERM.

    Sockets are bound first (port 0 = any free port), then ``announce`` gets ``{name: bound_port}``;
    once every server accepts connections, ``ready_file`` (if given) is written atomically with the
    same mapping as JSON. Returns when a server stops (SIGTERM/SIGINT: uvicorn's graceful shutdown,
    requests still running get ``_GRACE_S`` s), after stopping the others.

    Raises:
        OSError: a port cannot be bound.
    """
    import uvicorn

    servers: list[tuple[Any, socket.socket]] = []
    ports: dict[str, int] = {}
    for name, app, port in apps:
        sock = _bound_socket(host, port)
        ports[name] = sock.getsockname()[1]
        # timeout_graceful_shutdown: on SIGTERM, requests still running (a reset waiting for a slot
        # waits without limit) get this long, then they are cancelled, so the server stops promptly.
        config = uvicorn.Config(
            app, log_level=log_level, access_log=False, lifespan="off", timeout_graceful_shutdown=_GRACE_S
        )
        servers.append((uvicorn.Server(config), sock))
    if announce is not None:
        announce(dict(ports))
    tasks = [asyncio.create_task(server.serve(sockets=[sock])) for server, sock in servers]
    if ready_file:
        while not all(server.started for server, _ in servers):
            if any(t.done() for t in tasks):
                break
            await asyncio.sleep(0.01)
        _write_atomic(Path(ready_file), json.dumps(ports))
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for server, _ in servers:
        server.should_exit = True
    await asyncio.gather(*pending, return_exceptions=True)


async def _serve(args: argparse.Namespace, checkpoint: PolicyCheckpoint | None) -> None:
    from shopsim_sandbox.app import build_env_app
    from shopsim_sandbox.policy.decide import DEFAULT_LAPSE_RATES

    env_faults = fault_config_from_args(args, "env")
    policy_faults = fault_config_from_args(args, "policy")
    catalog, catalog_sha256 = _load_served_catalog(args)
    env_app = build_env_app(
        catalog,
        slots=args.slots,
        faults=env_faults,
        catalog_sha256=catalog_sha256,
        server_timing=args.server_timing,
        lease_ttl_s=args.lease_ttl_seconds,
    )
    apps: list[tuple[str, Any, int]] = [("env_port", env_app, args.port)]
    if not args.no_policy:
        from shopsim_sandbox.policy import build_policy_app

        # faults carry latency_ms; the checkpoint (if any) sets the lapse rates and the reported root
        policy_app = build_policy_app(
            seed=args.seed,
            faults=policy_faults,
            lapse_rates=checkpoint.lapses if checkpoint is not None else DEFAULT_LAPSE_RATES,
            model_root=args.policy_checkpoint,
        )
        apps.append(("policy_port", policy_app, args.policy_port))
    if args.analyst_port is not None:  # the deterministic Trace2Skill analyst (docs/research.md)
        from shopsim_sandbox.analyst import build_analyst_app

        analyst_app = build_analyst_app(seed=args.seed, malformed_rate=args.analyst_malformed_rate)
        apps.append(("analyst_port", analyst_app, args.analyst_port))
    # Everything loaded so far (catalog, index, apps) lives until exit: move it out of the cyclic GC's
    # reach. A full collection otherwise walks ~430k catalog objects (~0.1-0.25 s on 20,000 products)
    # and stalls every request in flight.
    gc.collect()
    gc.freeze()

    def announce(sockets: dict[str, int]) -> None:
        print(
            f"shopsim-sandbox: {catalog.active_task_count} tasks, {args.slots} slots, "
            f"{type(asyncio.get_running_loop()).__module__.split('.')[0]} loop, "
            f"env on http://{args.host}:{sockets['env_port']}"
            + (f", policy on http://{args.host}:{sockets['policy_port']}/v1" if "policy_port" in sockets else ""),
            file=sys.stderr,
            flush=True,
        )

    await serve_apps(apps, host=args.host, log_level=args.log_level, ready_file=args.ready_file, announce=announce)


def loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop factory of ``--loop auto|asyncio|uvloop`` for ``asyncio.Runner`` (None = asyncio's).

    Raises:
        ValueError: ``uvloop`` was asked for but is not installed.
    """
    # uvloop is optional (it comes with uvicorn[standard]); measured here it saves 1-4 % of the server
    # CPU per request and cuts the 64-session p99 by 15-25 %. uvicorn's own `loop` setting would not
    # apply: we run Server.serve ourselves.
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise ValueError(
                "--loop uvloop: uvloop is not installed; pip install uvloop or use --loop asyncio"
            ) from None
        return None
    return uvloop.new_event_loop


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shopsim-sandbox", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve the environment (and the baseline policy)")
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    serve.add_argument(
        "--port",
        type=int,
        default=_env_int("SHOPSIM_PORT", DEFAULT_PORT),
        help="environment port (env SHOPSIM_PORT, default 5700; 0 = any free port)",
    )
    serve.add_argument("--policy-port", type=int, default=5800, help="policy port (default 5800; 0 = any free port)")
    serve.add_argument(
        "--slots",
        type=int,
        default=_env_int("SHOPSIM_ENV_SLOTS", DEFAULT_SLOTS),
        help="number of environment slots (env SHOPSIM_ENV_SLOTS, default 20)",
    )
    serve.add_argument(
        "--catalog-size",
        type=int,
        default=DEFAULT_CATALOG_SIZE,
        help=f"synthetic catalog size (default {DEFAULT_CATALOG_SIZE})",
    )
    serve.add_argument("--seed", type=int, default=DEFAULT_SEED, help="catalog and policy seed (default 0)")
    serve.add_argument(
        "--catalog",
        default=None,
        help="serve this catalog JSON file instead of a synthetic one ('example' = http-contract §19.1)",
    )
    serve.add_argument("--no-policy", action="store_true", help="do not start the baseline policy")
    serve.add_argument(
        "--policy-checkpoint",
        default=None,
        help="start the baseline policy on this checkpoint file (shopsim-policy-checkpoint-v1: its lapse rates); "
        "default: the built-in rates",
    )
    serve.add_argument(
        "--analyst-port",
        type=int,
        default=None,
        help="also serve the deterministic Trace2Skill analyst on this port (0 = any free port)",
    )
    serve.add_argument(
        "--analyst-malformed-rate",
        type=float,
        default=0.25,
        help="share of first attempts the analyst answers malformed (default 0.25)",
    )
    serve.add_argument("--ready-file", default=None, help="write the bound ports as JSON here once serving")
    serve.add_argument("--log-level", default="warning", help="uvicorn log level (default warning)")
    serve.add_argument(
        "--server-timing",
        action="store_true",
        help="add `server-timing: app;dur=<ms>` to every env response (for benchmarks; off by default)",
    )
    serve.add_argument(
        "--loop",
        choices=("auto", "asyncio", "uvloop"),
        default="auto",
        help="event loop (default auto: uvloop when installed, else asyncio)",
    )
    serve.add_argument(
        "--lease-ttl-seconds",
        type=float,
        default=None,
        help="sandbox-only: reclaim a lease idle this long when a reset needs a slot "
        "(default: never, like the real server)",
    )
    add_fault_arguments(serve)
    catalog = sub.add_parser("catalog", help="write a synthetic catalog and its persona split file")
    catalog.add_argument("--out", required=True, type=Path, help="output directory")
    catalog.add_argument(
        "--size", type=int, default=DEFAULT_CATALOG_SIZE, help=f"products (default {DEFAULT_CATALOG_SIZE})"
    )
    catalog.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed (default 0)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of `shopsim-sandbox`; returns the process exit code."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "catalog":
            catalog_path, split_path = write_catalog(args.out, args.size, args.seed)
            print(f"wrote {catalog_path} and {split_path}")
            return 0
        if args.slots < 1:
            raise ValueError(f"--slots: must be >= 1 (got {args.slots})")
        if args.lease_ttl_seconds is not None and not args.lease_ttl_seconds > 0:
            raise ValueError(
                f"--lease-ttl-seconds: must be > 0 (got {args.lease_ttl_seconds}); omit it to keep leases forever"
            )
        checkpoint = None
        if args.policy_checkpoint is not None:
            if args.no_policy:
                raise ValueError("--policy-checkpoint: given with --no-policy; drop one of them")
            from shopsim_sandbox.policy.checkpoint import load_policy_checkpoint

            checkpoint = load_policy_checkpoint(args.policy_checkpoint)  # CheckpointError is a ValueError
        with asyncio.Runner(loop_factory=loop_factory(args.loop)) as runner:
            runner.run(_serve(args, checkpoint))
        return 0
    except (CatalogError, ValueError) as exc:
        print(f"shopsim-sandbox: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())

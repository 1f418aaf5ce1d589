"""The catalogue of malformed inputs (configs, splits, run directories, CLI arguments, unusable servers)
and the one line each gets. Holds no tests: `test_bad_inputs.py` runs every case, and

    .venv/bin/python tests/reliability/bad_inputs.py

reruns them all and rewrites the table in docs/errors.md (between the `bad-inputs` markers).

A case builds its files in a fresh folder and returns the `shopsimrl` argv; the promise checked for
every case is: the exit code, exactly one line on stderr (`shopsimrl: error[<code>]: ...`), and
nothing written or changed in that folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "errors.md"
START, END = "<!-- bad-inputs:start -->", "<!-- bad-inputs:end -->"


@dataclass
class Servers:
    """URLs of the real servers some cases need (a sandbox, an HTML page server, a self-signed HTTPS server)."""

    env_url: str
    policy_url: str
    served_model: str
    html_url: str
    tls_url: str = ""
    """``https://127.0.0.1:<port>`` answering /healthz and /v1/models, its certificate self-signed."""


@dataclass(frozen=True)
class Case:
    id: str
    what: str
    """The malformed input, as the docs table shows it."""
    build: Callable[[Path, Servers | None], list[str]]
    exit: int
    code: str
    needs_servers: bool = False


# ------------------------------------------------------------------------------------------ files

SPLITS = {
    "schema_version": "shopsimrl-persona-splits-v1",
    "version": "bad-inputs-v1",
    "splits": {
        "val": {"role": "val", "persona": True, "task_ids": [1, 2, 3]},
        "test": {"role": "test", "persona": True, "task_ids": [4, 5]},
        "empty": {"role": "val", "persona": True, "task_ids": []},
    },
}


def _base(servers: Servers | None = None) -> dict[str, Any]:
    return {
        "experiment": {"name": "bad", "output_dir": "runs", "seed": 1, "concurrency": 1},
        "tasks": {"split_file": "splits.json", "split": "val"},
        "environment": {"base_url": servers.env_url if servers else "http://127.0.0.1:9", "persona": None},
        "model": {
            "name": servers.served_model if servers else "served",
            "base_url": servers.policy_url if servers else "http://127.0.0.1:9/v1",
            "api_key_env": None,
        },
    }


def _write_splits(folder: Path, data: Any = None, raw: bytes | None = None) -> None:
    path = folder / "splits.json"
    if raw is not None:
        path.write_bytes(raw)
    else:
        path.write_text(json.dumps(SPLITS if data is None else data), encoding="utf-8")


def _cfg(folder: Path, config: dict[str, Any] | None = None, *, text: str | None = None) -> str:
    path = folder / "eval.yaml"
    path.write_text(text if text is not None else yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return str(path)


def _set(data: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    section, _, key = dotted.partition(".")
    if not key:
        data[section] = value
    else:
        data.setdefault(section, {})[key] = value
    return data


def config_case(
    dotted: str, value: Any, *, verb: str = "run", servers: bool = False
) -> Callable[[Path, Servers | None], list[str]]:
    def build(folder: Path, srv: Servers | None) -> list[str]:
        _write_splits(folder)
        return [verb, _cfg(folder, _set(_base(srv if servers else None), dotted, value))]

    return build


def drop_case(section: str) -> Callable[[Path, Servers | None], list[str]]:
    def build(folder: Path, srv: Servers | None) -> list[str]:
        _write_splits(folder)
        data = _base()
        data.pop(section)
        return ["run", _cfg(folder, data)]

    return build


def yaml_case(text: str) -> Callable[[Path, Servers | None], list[str]]:
    def build(folder: Path, srv: Servers | None) -> list[str]:
        _write_splits(folder)
        return ["run", _cfg(folder, text=text)]

    return build


def split_case(
    mutate: Callable[[dict[str, Any]], Any] | None = None, *, raw: bytes | None = None, split: str = "val"
) -> Callable[[Path, Servers | None], list[str]]:
    def build(folder: Path, srv: Servers | None) -> list[str]:
        data = json.loads(json.dumps(SPLITS))
        if mutate is not None:
            result = mutate(data)
            data = data if result is None else result
        _write_splits(folder, data, raw)
        return ["run", _cfg(folder, _set(_base(), "tasks.split", split))]

    return build


def _valid_yaml() -> str:
    return yaml.safe_dump(_base(), sort_keys=False)


def _alias_bomb() -> str:
    """The billion laughs as top-level keys: 9 anchors, each repeating the previous one nine times."""
    lines = ['lol0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 9):
        lines.append(f"lol{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]")
    return "\n".join(lines) + "\n"


def dotenv_case(text: str) -> Callable[[Path, Servers | None], list[str]]:
    def build(folder: Path, srv: Servers | None) -> list[str]:
        _write_splits(folder)
        (folder / "secrets.env").write_text(text, encoding="utf-8")
        return ["run", _cfg(folder, _set(_base(), "experiment.dotenv", "secrets.env"))]

    return build


_SPLITS_JSON = json.dumps(SPLITS)


def _manifest_dir(
    folder: Path,
    *,
    manifest: bytes | None = None,
    manifest_is_dir: bool = False,
    traces: bytes | None = None,
    other_plan: bool = False,
) -> Path:
    run_dir = folder / "runs" / "bad"
    run_dir.mkdir(parents=True)
    if manifest_is_dir:
        (run_dir / "manifest.json").mkdir()
    elif other_plan:
        from shopsimrl_core.runs.storage._store import RunStore

        RunStore(run_dir).write_manifest({"experiment": "bad", "jobs": []}, "0" * 64, {})
    elif manifest is not None:
        (run_dir / "manifest.json").write_bytes(manifest)
    if traces is not None:
        (run_dir / "traces.jsonl").write_bytes(traces)
    return run_dir


def run_dir_case(
    args: list[str] | None = None, verb: str = "run", **kwargs: Any
) -> Callable[[Path, Servers | None], list[str]]:
    def build(folder: Path, srv: Servers | None) -> list[str]:
        _write_splits(folder)
        config = _cfg(folder, _base())
        _manifest_dir(folder, **kwargs)
        return [verb, *(args or []), config]

    return build


def _existing_run(folder: Path) -> None:
    """A complete run directory of the base plan (made with the real evaluator and a stand-in episode)."""
    import asyncio

    from shopsimrl_core.episode._trace import new_trace, utc_now
    from shopsimrl_core.runs.config._config import load_config
    from shopsimrl_core.runs.execution._evaluator import arun_evaluation

    async def episode(job: Any, **_: Any) -> dict[str, Any]:
        record = new_trace(job.to_dict(), job.episode_id, {}, utc_now())
        record.update(status="completed", final={"done": True, "reward": 1.0})
        return record

    asyncio.run(arun_evaluation(load_config(folder / "eval.yaml"), episode_fn=episode))


def resume_refused(folder: Path, srv: Servers | None) -> list[str]:
    _write_splits(folder)
    config = _cfg(folder, _base())
    _existing_run(folder)
    return ["run", "--no-resume", config]


def locked(folder: Path, srv: Servers | None, content: bytes | None = None) -> list[str]:
    _write_splits(folder)
    config = _cfg(folder, _base())
    run_dir = folder / "runs" / "bad"
    run_dir.mkdir(parents=True)
    fd = os.open(run_dir / "run.lock", os.O_RDWR | os.O_CREAT, 0o644)
    os.write(
        fd,
        content
        if content is not None
        else json.dumps(
            {"pid": 1, "host": "elsewhere", "started_at": "2026-01-01T00:00:00+00:00", "invocation_id": "x"}
        ).encode(),
    )
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    _HELD.append(fd)  # released by release_held() after the case
    return ["run", config]


def linked(name: str) -> Callable[[Path, Servers | None], list[str]]:
    """A run folder whose *name* is a symbolic link to a file outside it (a "system file")."""

    def build(folder: Path, srv: Servers | None) -> list[str]:
        _write_splits(folder)
        config = _cfg(folder, _base())
        run_dir = folder / "runs" / "bad"
        run_dir.mkdir(parents=True)
        (folder / "system-file").write_text("root:x:0:0\n", encoding="utf-8")
        (run_dir / name).symlink_to(folder / "system-file")
        return ["run", config]

    return build


_HELD: list[int] = []


def release_held() -> None:
    while _HELD:
        os.close(_HELD.pop())


def exported(folder: Path, srv: Servers | None) -> list[str]:
    _write_splits(folder)
    config = _cfg(folder, _base())
    _existing_run(folder)
    traces = folder / "runs" / "bad" / "traces.jsonl"
    record = json.loads(traces.read_bytes().splitlines()[0])
    record["redaction"] = {"policy": "export"}
    with open(traces, "ab") as handle:
        handle.write((json.dumps(record) + "\n").encode())
    return ["run", config]


def edited_manifest(edit: Callable[[dict[str, Any]], None]) -> Callable[[Path, Servers | None], list[str]]:
    """A complete run whose manifest.json was then edited by hand (*edit* changes the parsed manifest)."""

    def build(folder: Path, srv: Servers | None) -> list[str]:
        _write_splits(folder)
        config = _cfg(folder, _base())
        _existing_run(folder)
        path = folder / "runs" / "bad" / "manifest.json"
        manifest = json.loads(path.read_text(encoding="utf-8"))
        edit(manifest)
        path.write_text(json.dumps(manifest, indent=2), encoding="utf-8")
        return ["run", config]

    return build


def output_dir_is_file(folder: Path, srv: Servers | None) -> list[str]:
    _write_splits(folder)
    (folder / "runs").write_text("not a folder\n", encoding="utf-8")
    return ["run", _cfg(folder, _base())]


def cli(*argv: str, make_config: bool = False, make_run: bool = False) -> Callable[[Path, Servers | None], list[str]]:
    def build(folder: Path, srv: Servers | None) -> list[str]:
        out = list(argv)
        if make_config:
            _write_splits(folder)
            out.append(_cfg(folder, _base()))
        if make_run:
            _write_splits(folder)
            _cfg(folder, _base())
            _existing_run(folder)
            out = [a.replace("RUN", str(folder / "runs" / "bad")) for a in out]
        return [a.replace("TMP", str(folder)) for a in out]

    return build


def plain_dir(folder: Path, srv: Servers | None) -> list[str]:
    (folder / "notes").mkdir()
    (folder / "notes" / "readme.txt").write_text("hello\n", encoding="utf-8")
    return ["summarize", str(folder / "notes")]


def server_case(dotted: str, value: Callable[[Servers], Any]) -> Callable[[Path, Servers | None], list[str]]:
    def build(folder: Path, srv: Servers | None) -> list[str]:
        assert srv is not None
        _write_splits(folder)
        return ["run", _cfg(folder, _set(_base(srv), dotted, value(srv)))]

    return build


def _apikey(folder: Path, srv: Servers | None) -> list[str]:
    os.environ.pop("SHOPSIMRL_BAD_INPUT_KEY", None)
    return config_case("model.api_key_env", "SHOPSIMRL_BAD_INPUT_KEY")(folder, srv)


def _dotenv_missing(folder: Path, srv: Servers | None) -> list[str]:
    return config_case("experiment.dotenv", "missing.env")(folder, srv)


def _splits(mutator: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
    return mutator


def _val(data: dict[str, Any]) -> dict[str, Any]:
    return data["splits"]["val"]


CASES: list[Case] = [
    # --- the config file itself
    Case("config-missing", "config path that does not exist", cli("run", "TMP/nope.yaml"), 2, "input-missing"),
    Case("config-is-dir", "config path that is a directory", cli("run", "TMP"), 6, "input-not-a-file"),
    Case(
        "config-not-utf8",
        "config file in GB18030, not UTF-8",
        lambda f, s: (
            _write_splits(f),
            (f / "eval.yaml").write_bytes("experiment:\n  name: 实验\n".encode("gb18030")),
            ["run", str(f / "eval.yaml")],
        )[2],
        7,
        "input-not-utf8",
    ),
    Case("config-empty", "empty config file", yaml_case(""), 2, "config-invalid"),
    Case(
        "config-syntax", "YAML syntax error (unclosed bracket)", yaml_case("tasks: [split_file\n"), 2, "config-invalid"
    ),
    Case("config-list", "top level is a list", yaml_case("- tasks\n- model\n"), 2, "config-invalid"),
    Case(
        "config-alias-bomb",
        "a YAML alias bomb (9 anchors, each repeating the last nine times: 9⁹ values)",
        yaml_case(_valid_yaml() + _alias_bomb()),
        2,
        "config-invalid",
    ),
    Case(
        "config-deep-list",
        "a list nested 5,000 deep in the config",
        yaml_case(_valid_yaml() + "deep: " + "[" * 5000 + "]" * 5000 + "\n"),
        2,
        "config-invalid",
    ),
    Case("config-scalar", "top level is a string", yaml_case("hello\n"), 2, "config-invalid"),
    Case(
        "dup-section",
        "`experiment:` twice",
        yaml_case(_valid_yaml() + "experiment:\n  name: other\n"),
        2,
        "config-invalid",
    ),
    Case(
        "dup-key",
        "`model.name` twice",
        yaml_case(_valid_yaml().replace("  name: served\n", "  name: served\n  name: other\n")),
        2,
        "config-invalid",
    ),
    Case(
        "unknown-section",
        "unknown top-level key `experimnt`",
        config_case("experimnt", {"name": "x"}),
        2,
        "config-invalid",
    ),
    Case("models-list", "top-level `models:` list", config_case("models", [{"name": "a"}]), 2, "config-invalid"),
    Case(
        "unknown-experiment-key",
        "typo `experiment.concurency`",
        config_case("experiment.concurency", 3),
        2,
        "config-invalid",
    ),
    Case("unknown-model-key", "typo `model.temprature`", config_case("model.temprature", 0.5), 2, "config-invalid"),
    Case("missing-tasks", "no `tasks` section", drop_case("tasks"), 2, "config-invalid"),
    Case("missing-model", "no `model` section", drop_case("model"), 2, "config-invalid"),
    Case("section-not-mapping", "`runtime: 5`", config_case("runtime", 5), 2, "config-invalid"),
    Case(
        "missing-split-file",
        "`tasks` without `split_file`",
        config_case("tasks", {"split": "val"}),
        2,
        "config-invalid",
    ),
    Case("split-name-empty", '`tasks.split: ""`', config_case("tasks.split", ""), 2, "config-invalid"),
    Case(
        "concurrency-zero", "`experiment.concurrency: 0`", config_case("experiment.concurrency", 0), 2, "config-invalid"
    ),
    Case(
        "concurrency-string",
        '`experiment.concurrency: "4"`',
        config_case("experiment.concurrency", "4"),
        2,
        "config-invalid",
    ),
    Case(
        "concurrency-bool",
        "`experiment.concurrency: true`",
        config_case("experiment.concurrency", True),
        2,
        "config-invalid",
    ),
    Case("seed-float", "`experiment.seed: 1.5`", config_case("experiment.seed", 1.5), 2, "config-invalid"),
    Case(
        "retries-negative",
        "`experiment.max_episode_retries: -1`",
        config_case("experiment.max_episode_retries", -1),
        2,
        "config-invalid",
    ),
    Case(
        "max-attempts-zero",
        "`experiment.max_attempts: 0`",
        config_case("experiment.max_attempts", 0),
        2,
        "config-invalid",
    ),
    Case(
        "attempts-contradict",
        "`max_attempts: 2` with `max_episode_retries: 5`",
        lambda f, s: (
            _write_splits(f),
            ["run", _cfg(f, _set(_set(_base(), "experiment.max_attempts", 2), "experiment.max_episode_retries", 5))],
        )[1],
        2,
        "config-invalid",
    ),
    Case(
        "total-attempts-zero",
        "`experiment.max_total_attempts: 0`",
        config_case("experiment.max_total_attempts", 0),
        2,
        "config-invalid",
    ),
    Case("resume-string", '`experiment.resume: "yes"`', config_case("experiment.resume", "yes"), 2, "config-invalid"),
    Case("name-unsafe", '`experiment.name: "///"`', config_case("experiment.name", "///"), 2, "config-invalid"),
    Case(
        "planned-bound-zero",
        "`experiment.max_planned_episodes: 0`",
        config_case("experiment.max_planned_episodes", 0),
        2,
        "config-invalid",
    ),
    Case(
        "outage-negative",
        "`experiment.outage_budget_seconds: -1`",
        config_case("experiment.outage_budget_seconds", -1),
        2,
        "config-invalid",
    ),
    Case("dotenv-missing", "`experiment.dotenv` names a missing file", _dotenv_missing, 2, "dotenv-missing"),
    Case("dotenv-no-equals", "a `.env` line without `=`", dotenv_case("A=1\nnoequals\n"), 2, "dotenv-invalid"),
    Case(
        "dotenv-bad-name",
        "a `.env` name with a space (`MY KEY=1`)",
        dotenv_case("MY KEY=1\n"),
        2,
        "dotenv-invalid",
    ),
    Case(
        "dotenv-open-quote",
        "a `.env` value opening a quote it never closes",
        dotenv_case('TOKEN="s3cret\n'),
        2,
        "dotenv-invalid",
    ),
    Case(
        "dotenv-duplicate",
        "a `.env` name set twice",
        dotenv_case("TOKEN=a\n# again\nTOKEN=b\n"),
        2,
        "dotenv-invalid",
    ),
    Case("sample-zero", "`tasks.sample_size: 0`", config_case("tasks.sample_size", 0), 2, "config-invalid"),
    Case(
        "sample-too-big",
        "`tasks.sample_size: 50` on a 3-task split",
        config_case("tasks.sample_size", 50),
        2,
        "config-invalid",
    ),
    Case("repeats-zero", "`tasks.repeats: 0`", config_case("tasks.repeats", 0), 2, "config-invalid"),
    Case(
        "repeats-1e9-string",
        "`tasks.repeats: 1e9` (YAML reads a string)",
        yaml_case(_valid_yaml().replace("  split: val\n", "  split: val\n  repeats: 1e9\n")),
        2,
        "config-invalid",
    ),
    Case(
        "repeats-huge", "`tasks.repeats: 1000000000`", config_case("tasks.repeats", 1_000_000_000), 2, "plan-too-large"
    ),
    Case(
        "repeats-over-bound",
        "`tasks.repeats: 40` with `max_planned_episodes: 100`",
        lambda f, s: (
            _write_splits(f),
            ["plan", _cfg(f, _set(_set(_base(), "tasks.repeats", 40), "experiment.max_planned_episodes", 100))],
        )[1],
        2,
        "plan-too-large",
    ),
    Case("split-unknown", "`tasks.split: vall`", config_case("tasks.split", "vall"), 2, "split-unknown"),
    Case(
        "env-url-ftp",
        "`environment.base_url: ftp://…`",
        config_case("environment.base_url", "ftp://127.0.0.1:5700"),
        2,
        "config-invalid",
    ),
    Case(
        "env-url-no-scheme",
        "`environment.base_url: localhost:5700`",
        config_case("environment.base_url", "localhost:5700"),
        2,
        "config-invalid",
    ),
    Case(
        "env-url-empty-host",
        "`environment.base_url: http://`",
        config_case("environment.base_url", "http://"),
        2,
        "config-invalid",
    ),
    Case("env-timeout-zero", "`environment.timeout: 0`", config_case("environment.timeout", 0), 2, "config-invalid"),
    Case(
        "env-persona-string",
        '`environment.persona: "true"`',
        config_case("environment.persona", "true"),
        2,
        "config-invalid",
    ),
    Case(
        "env-persona-contradicts",
        "`environment.persona: false` on a persona split",
        config_case("environment.persona", False),
        2,
        "config-invalid",
    ),
    Case(
        "env-transport-unknown",
        "`environment.http_transport: quic`",
        config_case("environment.http_transport", "quic"),
        2,
        "config-invalid",
    ),
    Case(
        "env-streams-https",
        "`http_transport: streams` with an https URL",
        lambda f, s: (
            _write_splits(f),
            [
                "run",
                _cfg(
                    f,
                    _set(
                        _base(),
                        "environment",
                        {"base_url": "https://example.org", "persona": None, "http_transport": "streams"},
                    ),
                ),
            ],
        )[1],
        2,
        "config-invalid",
    ),
    Case(
        "env-connections-zero",
        "`environment.max_connections: 0`",
        config_case("environment.max_connections", 0),
        2,
        "config-invalid",
    ),
    Case(
        "reset-wait-zero",
        "`environment.reset_wait_seconds: 0`",
        config_case("environment.reset_wait_seconds", 0),
        2,
        "config-invalid",
    ),
    Case(
        "release-retry-negative",
        "`environment.release_retry_seconds: -1`",
        config_case("environment.release_retry_seconds", -1),
        2,
        "config-invalid",
    ),
    Case("max-steps-zero", "`runtime.max_steps: 0`", config_case("runtime.max_steps", 0), 2, "config-invalid"),
    Case("runtime-unknown", "`runtime.max_step: 30`", config_case("runtime.max_step", 30), 2, "config-invalid"),
    Case(
        "prompt-both",
        "both `prompt.system_prompt` and `system_prompt_file`",
        lambda f, s: (
            _write_splits(f),
            (f / "p.txt").write_text("x", encoding="utf-8"),
            ["run", _cfg(f, _set(_base(), "prompt", {"system_prompt": "x", "system_prompt_file": "p.txt"}))],
        )[2],
        2,
        "config-invalid",
    ),
    Case(
        "prompt-file-missing",
        "`prompt.system_prompt_file` missing",
        config_case("prompt.system_prompt_file", "nope.txt"),
        2,
        "config-invalid",
    ),
    Case("prompt-language", "`prompt.language: fr`", config_case("prompt.language", "fr"), 2, "config-invalid"),
    Case(
        "skills-missing",
        "`skills.path` names a missing file",
        config_case("skills.path", "bank.json"),
        2,
        "config-invalid",
    ),
    Case("skills-max-zero", "`skills.max_skills: 0`", config_case("skills.max_skills", 0), 2, "config-invalid"),
    Case("model-name-empty", '`model.name: ""`', config_case("model.name", ""), 2, "config-invalid"),
    Case(
        "model-url-ftp",
        "`model.base_url: ftp://…`",
        config_case("model.base_url", "ftp://127.0.0.1/v1"),
        2,
        "config-invalid",
    ),
    Case(
        "model-url-words",
        "`model.base_url: my server`",
        config_case("model.base_url", "my server"),
        2,
        "config-invalid",
    ),
    Case("temperature-high", "`model.temperature: 3`", config_case("model.temperature", 3), 2, "config-invalid"),
    Case("top-p-zero", "`model.top_p: 0`", config_case("model.top_p", 0), 2, "config-invalid"),
    Case("max-tokens-zero", "`model.max_tokens: 0`", config_case("model.max_tokens", 0), 2, "config-invalid"),
    Case("max-retries-zero", "`model.max_retries: 0`", config_case("model.max_retries", 0), 2, "config-invalid"),
    Case("model-timeout-negative", "`model.timeout: -1`", config_case("model.timeout", -1), 2, "config-invalid"),
    Case("tool-choice-empty", '`model.tool_choice: ""`', config_case("model.tool_choice", ""), 2, "config-invalid"),
    Case(
        "tool-call-content",
        "`model.tool_call_content: none`",
        config_case("model.tool_call_content", "none"),
        2,
        "config-invalid",
    ),
    Case("extra-body-list", "`model.extra_body: [1]`", config_case("model.extra_body", [1]), 2, "config-invalid"),
    Case("stream-string", '`model.stream: "no"`', config_case("model.stream", "no"), 2, "config-invalid"),
    Case("model-id-unsafe", '`model.id: "@@@"`', config_case("model.id", "@@@"), 2, "config-invalid"),
    Case("api-key-unset", "`model.api_key_env` names an unset variable", _apikey, 2, "api-key-missing"),
    # --- split files
    Case(
        "split-missing",
        "`tasks.split_file` does not exist",
        config_case("tasks.split_file", "nope.json"),
        2,
        "config-invalid",
    ),
    Case(
        "split-is-dir",
        "split file path is a directory",
        lambda f, s: (
            (f / "splitdir").mkdir(),
            _write_splits(f),
            ["run", _cfg(f, _set(_base(), "tasks.split_file", "splitdir"))],
        )[2],
        2,
        "config-invalid",
    ),
    Case(
        "split-not-utf8",
        "split file in Latin-1",
        split_case(raw='{"splits": {"val": {"task_ids": [1], "note": "café"}}}'.encode("latin-1")),
        7,
        "input-not-utf8",
    ),
    Case("split-not-json", "split file is not JSON", split_case(raw=b"{splits: [}"), 2, "split-invalid"),
    Case(
        "split-deep",
        "split file nested 5,000 deep",
        split_case(raw=b'{"splits": {"val": {"task_ids": ' + b"[" * 5000 + b"]" * 5000 + b"}}}"),
        2,
        "split-invalid",
    ),
    Case(
        "split-duplicate-split",
        "split `val` given twice in the split JSON",
        split_case(raw=_SPLITS_JSON.replace('"splits": {', '"splits": {"val": {"task_ids": [9]}, ', 1).encode()),
        2,
        "split-invalid",
    ),
    Case(
        "split-duplicate-key",
        "`task_ids` given twice in one split",
        split_case(
            raw=_SPLITS_JSON.replace('"task_ids": [1, 2, 3]', '"task_ids": [1, 2, 3], "task_ids": [7]').encode()
        ),
        2,
        "split-invalid",
    ),
    Case("split-top-list", "split file top level is a list", split_case(lambda d: [1, 2]), 2, "split-invalid"),
    Case("splits-not-object", "`splits` is a list", split_case(lambda d: {"splits": [1]}), 2, "split-invalid"),
    Case(
        "split-body-list",
        "a split is a list, not an object",
        split_case(lambda d: d["splits"].update(val=[1, 2])),
        2,
        "split-invalid",
    ),
    Case(
        "task-ids-string", '`task_ids: "1,2"`', split_case(lambda d: _val(d).update(task_ids="1,2")), 2, "split-invalid"
    ),
    Case("task-id-negative", "task id -1", split_case(lambda d: _val(d).update(task_ids=[1, -1])), 2, "split-invalid"),
    Case(
        "task-id-bool", "task id `true`", split_case(lambda d: _val(d).update(task_ids=[1, True])), 2, "split-invalid"
    ),
    Case("task-id-float", "task id 2.0", split_case(lambda d: _val(d).update(task_ids=[1, 2.0])), 2, "split-invalid"),
    Case(
        "task-id-duplicate",
        "task id listed twice",
        split_case(lambda d: _val(d).update(task_ids=[1, 2, 1])),
        2,
        "split-invalid",
    ),
    Case(
        "range-backwards",
        "legacy range with end < start",
        split_case(lambda d: d["splits"].update(val={"start": 5, "end": 2, "persona": True})),
        2,
        "split-invalid",
    ),
    Case(
        "split-no-ids",
        "a split with neither `task_ids` nor a range",
        split_case(lambda d: d["splits"].update(val={"persona": True})),
        2,
        "split-invalid",
    ),
    Case(
        "split-persona-string",
        '`persona: "yes"` in a split',
        split_case(lambda d: _val(d).update(persona="yes")),
        2,
        "split-invalid",
    ),
    Case("split-role-int", "`role: 5` in a split", split_case(lambda d: _val(d).update(role=5)), 2, "split-invalid"),
    Case(
        "split-hash-mismatch",
        "`task_ids_sha256` that does not match the ids",
        split_case(lambda d: _val(d).update(task_ids_sha256="0" * 64)),
        2,
        "split-invalid",
    ),
    Case(
        "split-count-mismatch",
        "`task_count: 5` with 3 ids",
        split_case(lambda d: _val(d).update(task_count=5)),
        2,
        "split-invalid",
    ),
    Case(
        "split-count-string",
        '`task_count: "3"`',
        split_case(lambda d: _val(d).update(task_count="3")),
        2,
        "split-invalid",
    ),
    Case("split-empty", "an empty split (`task_ids: []`)", split_case(split="empty"), 2, "split-empty"),
    Case(
        "test-split-guard",
        "`run` on the test split without `--allow-test-split`",
        split_case(split="test"),
        2,
        "test-split-not-opted-in",
    ),
    # --- run directories
    Case("resume-disabled", "`--no-resume` on a directory that holds a run", resume_refused, 2, "resume-disabled"),
    Case(
        "fingerprint-mismatch",
        "run directory of another plan",
        run_dir_case(other_plan=True),
        2,
        "fingerprint-mismatch",
    ),
    Case("manifest-not-json", "`manifest.json` is not JSON", run_dir_case(manifest=b"{oops"), 2, "manifest-invalid"),
    Case("manifest-is-dir", "`manifest.json` is a directory", run_dir_case(manifest_is_dir=True), 6, "path-wrong-type"),
    Case(
        "manifest-not-utf8",
        "`manifest.json` is not UTF-8",
        run_dir_case(manifest=b'{"plan": "\xff"}'),
        7,
        "input-not-utf8",
    ),
    Case(
        "traces-without-manifest",
        "`traces.jsonl` without a manifest",
        run_dir_case(traces=b'{"episode_id": "x"}\n'),
        2,
        "fingerprint-mismatch",
    ),
    Case("run-locked", "run directory locked by another live process", locked, 2, "run-locked"),
    Case(
        "run-lock-garbage",
        "`run.lock` holding garbage bytes, locked by another live process",
        lambda f, s: locked(f, s, b"\xff\xfe\x00garbage"),
        2,
        "run-locked",
    ),
    Case(
        "traces-symlink",
        "`traces.jsonl` is a symbolic link to a file outside the run folder",
        linked("traces.jsonl"),
        2,
        "run-dir-symlink",
    ),
    Case(
        "summary-symlink",
        "`summary.json` (any file in the run folder) is a symbolic link",
        linked("summary.json"),
        2,
        "run-dir-symlink",
    ),
    Case(
        "nothing-to-retry",
        "`retry-failed` on a directory without a run",
        cli("retry-failed", make_config=True),
        2,
        "nothing-to-retry",
    ),
    Case(
        "export-in-traces",
        "an exported (redacted) record appended to `traces.jsonl`",
        exported,
        2,
        "export-not-resumable",
    ),
    Case(
        "manifest-max-steps-edited",
        "`manifest.json` edited by hand: `plan.runtime.max_steps` 30 → 99",
        edited_manifest(lambda m: m["plan"]["runtime"].update(max_steps=99)),
        2,
        "fingerprint-mismatch",
    ),
    Case(
        "manifest-fingerprint-zeroed",
        "`manifest.json` edited by hand: `plan_fingerprint` zeroed",
        edited_manifest(lambda m: m.update(plan_fingerprint="0" * 64)),
        2,
        "fingerprint-mismatch",
    ),
    Case("output-dir-is-file", "`experiment.output_dir` is a file", output_dir_is_file, 6, "path-wrong-type"),
    Case("summarize-missing", "`summarize` of a missing path", cli("summarize", "TMP/nope"), 2, "run-dir-missing"),
    Case(
        "summarize-file",
        "`summarize` of a file",
        lambda f, s: ((f / "x.txt").write_text("x"), ["summarize", str(f / "x.txt")])[1],
        2,
        "run-dir-missing",
    ),
    Case("summarize-plain-dir", "`summarize` of a directory that holds no run", plain_dir, 2, "run-dir-missing"),
    Case("compare-missing", "`compare` of two missing paths", cli("compare", "TMP/a", "TMP/b"), 2, "run-dir-missing"),
    Case(
        "compare-one-missing",
        "`compare` of a run and a missing path",
        cli("compare", "RUN", "TMP/b", make_run=True),
        2,
        "run-dir-missing",
    ),
    Case(
        "compare-output-dir",
        "`compare --output` is a directory",
        cli("compare", "RUN", "RUN", "--output", "TMP", make_run=True),
        6,
        "path-wrong-type",
    ),
    # --- command-line arguments
    Case("no-verb", "`shopsimrl` without a verb", cli(), 2, "usage"),
    Case("unknown-verb", "`shopsimrl launch`", cli("launch"), 2, "usage"),
    Case("run-no-config", "`run` without a config", cli("run"), 2, "usage"),
    Case("unknown-flag", "`run --fast`", cli("run", "--fast", make_config=True), 2, "usage"),
    Case(
        "max-attempts-zero-flag", "`--max-attempts 0`", cli("run", "--max-attempts", "0", make_config=True), 2, "usage"
    ),
    Case(
        "max-attempts-word", "`--max-attempts many`", cli("run", "--max-attempts", "many", make_config=True), 2, "usage"
    ),
    Case(
        "retries-negative-flag",
        "`--max-episode-retries -1`",
        cli("run", "--max-episode-retries", "-1", make_config=True),
        2,
        "usage",
    ),
    Case("resume-both", "`--resume --no-resume`", cli("run", "--resume", "--no-resume", make_config=True), 2, "usage"),
    Case("progress-unknown", "`--progress fancy`", cli("run", "--progress", "fancy", make_config=True), 2, "usage"),
    Case(
        "attempt-flags-disagree",
        "`--max-attempts 2 --max-episode-retries 3`",
        cli("run", "--max-attempts", "2", "--max-episode-retries", "3", make_config=True),
        2,
        "config-invalid",
    ),
    Case(
        "confidence-two",
        "`compare --confidence-level 2`",
        cli("compare", "TMP/a", "TMP/b", "--confidence-level", "2"),
        2,
        "usage",
    ),
    Case(
        "confidence-zero",
        "`compare --confidence-level 0`",
        cli("compare", "TMP/a", "TMP/b", "--confidence-level", "0"),
        2,
        "usage",
    ),
    Case(
        "confidence-word",
        "`compare --confidence-level high`",
        cli("compare", "TMP/a", "TMP/b", "--confidence-level", "high"),
        2,
        "usage",
    ),
    Case(
        "bootstrap-zero",
        "`compare --bootstrap-samples 0`",
        cli("compare", "TMP/a", "TMP/b", "--bootstrap-samples", "0"),
        2,
        "usage",
    ),
    Case("rng-unknown", "`compare --rng mt`", cli("compare", "TMP/a", "TMP/b", "--rng", "mt"), 2, "usage"),
    Case("requested-negative", "`summarize --requested -1`", cli("summarize", "TMP", "--requested", "-1"), 2, "usage"),
    Case("plan-unknown-flag", "`plan --all`", cli("plan", "--all", make_config=True), 2, "usage"),
    # --- servers that cannot serve the run (preflight; nothing is written)
    Case(
        "env-refused",
        "environment URL where nothing listens",
        config_case("environment.base_url", "http://127.0.0.1:9"),
        2,
        "environment-unreachable",
    ),
    Case(
        "model-refused",
        "model URL where nothing listens",
        server_case("model.base_url", lambda s: "http://127.0.0.1:9/v1"),
        2,
        "model-unreachable",
        needs_servers=True,
    ),
    Case(
        "model-html",
        "model URL answering 200 with an HTML page",
        server_case("model.base_url", lambda s: s.html_url),
        2,
        "model-bad-response",
        needs_servers=True,
    ),
    Case(
        "model-not-served",
        "`model.name` the server does not serve",
        server_case("model.name", lambda s: "gpt-nonexistent"),
        2,
        "model-not-served",
        needs_servers=True,
    ),
    Case(
        "env-tls-untrusted",
        "environment URL over HTTPS with a self-signed certificate (no CA given)",
        server_case("environment.base_url", lambda s: s.tls_url),
        2,
        "tls-untrusted",
        needs_servers=True,
    ),
    Case(
        "model-tls-untrusted",
        "model URL over HTTPS with a self-signed certificate (no CA given)",
        server_case("model.base_url", lambda s: s.tls_url + "/v1"),
        2,
        "tls-untrusted",
        needs_servers=True,
    ),
    Case(
        "model-url-no-v1",
        "model URL without `/v1` (GET /models answers 404)",
        server_case("model.base_url", lambda s: s.policy_url[: -len("/v1")]),
        2,
        "model-unreachable",
        needs_servers=True,
    ),
]


# ------------------------------------------------------------------------------------------ running


def snapshot(folder: Path) -> dict[str, str]:
    """Every path under *folder* with the SHA-256 of its bytes ("dir" for a folder): what "nothing
    written" compares."""
    import hashlib

    out = {}
    for path in sorted(folder.rglob("*")):
        out[str(path.relative_to(folder))] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@dataclass
class Outcome:
    exit: int
    stderr: str
    changed: list[str]


def run_case(case: Case, folder: Path, servers: Servers | None) -> Outcome:
    """Build the case in *folder*, run `shopsimrl` in-process there, and report what happened."""
    from shopsimrl_core.cli._main import main

    folder.mkdir(parents=True, exist_ok=True)
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        argv = case.build(folder, servers)
        before = snapshot(folder)
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse
                code = int(exc.code or 0)
        after = snapshot(folder)
    finally:
        os.chdir(cwd)
        release_held()
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    return Outcome(code, err.getvalue(), changed)


def normalise(line: str, folder: Path, servers: Servers | None) -> str:
    """The line as the docs show it: the case folder as `<tmp>`, loopback ports as `<port>`."""
    text = line.replace(str(folder), "<tmp>")
    text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>", text)
    return text


class _Html(BaseHTTPRequestHandler):
    def _page(self) -> None:
        body = b"<!doctype html><html><body><h1>Welcome</h1></body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _page

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def html_server() -> Iterator[str]:
    """A real HTTP server on a free loopback port answering every request with a 200 HTML page."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Html)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


class _Tls(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path.endswith("/models"):
            body = json.dumps({"object": "list", "data": [{"id": "served", "object": "model"}]}).encode()
        else:
            body = json.dumps({"status": "ok", "environment_slots": 1, "free_slots": 1}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def make_certificate(folder: Path) -> tuple[Path, Path]:
    """A fresh self-signed certificate for 127.0.0.1 (``openssl req``): ``(cert.pem, key.pem)``."""
    import subprocess

    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    return cert, key


@contextlib.contextmanager
def tls_server() -> Iterator[tuple[str, Path]]:
    """A real HTTPS server on a free loopback port with a self-signed certificate; yields its URL and the
    certificate (the CA a client would need)."""
    import ssl
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tls-") as tmp:
        cert, key = make_certificate(Path(tmp))
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Tls)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"https://127.0.0.1:{server.server_address[1]}", cert
        finally:
            server.shutdown()
            server.server_close()


def table_rows(results: list[tuple[Case, str]]) -> list[str]:
    rows = ["| # | malformed input | exit | the one line on stderr |", "|---|---|---|---|"]
    for number, (case, line) in enumerate(results, start=1):
        shown = line.replace("|", "\\|")
        rows.append(f"| {number} | {case.what} | {case_exit(case)} | `{shown}` |")
    return rows


def case_exit(case: Case) -> int:
    return case.exit


def render(results: list[tuple[Case, str]]) -> str:
    return "\n".join([START, *table_rows(results), END])


def documented_rows() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    if START not in text:
        return []
    return text.split(START, 1)[1].split(END, 1)[0].strip().splitlines()


def main() -> int:
    """Run every case and rewrite the docs table."""
    import tempfile

    sys.path.insert(0, str(REPO))
    from shopsim_sandbox.testing import SandboxServer

    results: list[tuple[Case, str]] = []
    with SandboxServer(slots=2) as sandbox, html_server() as html, tls_server() as (tls, _):
        servers = Servers(sandbox.env_url, sandbox.policy_url or "", sandbox.served_model or "", html, tls)
        for case in CASES:
            with tempfile.TemporaryDirectory() as tmp:
                outcome = run_case(case, Path(tmp) / "case", servers)
                lines = outcome.stderr.strip().splitlines()
                line = normalise(lines[0] if lines else "", Path(tmp) / "case", servers)
                flag = (
                    "" if (outcome.exit == case.exit and len(lines) == 1 and not outcome.changed) else "  <-- MISMATCH"
                )
                print(f"{case.id}: exit {outcome.exit} lines {len(lines)} changed {outcome.changed}{flag}\n  {line}")
                results.append((case, line))
    text = DOC.read_text(encoding="utf-8")
    block = render(results)
    if START in text:
        head, rest = text.split(START, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    DOC.write_text(text, encoding="utf-8")
    print(f"{len(results)} cases written to {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml
from testkit.loopback import make_certificate, threaded_server

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
    program: str = "shopsimrl"
    """Whose argv *build* returns: ``shopsimrl``, or ``shopsimrl-registry`` (``-m shopsimrl_dagster.registry``)."""


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
    lock_is_dir: bool = False,
) -> Path:
    run_dir = folder / "runs" / "bad"
    run_dir.mkdir(parents=True)
    if lock_is_dir:
        (run_dir / "run.lock").mkdir()
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


def with_file(
    name: str, content: bytes | None, argv: list[str] | None = None, **settings: Any
) -> Callable[[Path, Servers | None], list[str]]:
    """A base config (with *settings* as dotted keys) next to a file *name* holding *content* (None: a
    folder); *argv* (``TMP`` the case folder, ``CFG`` the config) instead of ``run CFG``."""

    def build(folder: Path, srv: Servers | None) -> list[str]:
        _write_splits(folder)
        if content is None:
            (folder / name).mkdir(parents=True, exist_ok=True)
        else:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(content)
        data = _base()
        for dotted, value in settings.items():
            _set(data, dotted.replace("__", "."), value)
        config = _cfg(folder, data)
        return [a.replace("TMP", str(folder)).replace("CFG", config) for a in (argv or ["run", "CFG"])]

    return build


def after_run(
    mutate: Callable[[Path], Any], argv: list[str] | None = None
) -> Callable[[Path, Servers | None], list[str]]:
    """A complete run of the base plan, then *mutate* (given the case folder); *argv* (``TMP``, ``RUN``,
    ``CFG``) instead of ``run CFG``."""

    def build(folder: Path, srv: Servers | None) -> list[str]:
        _write_splits(folder)
        config = _cfg(folder, _base())
        _existing_run(folder)
        mutate(folder)
        run = str(folder / "runs" / "bad")
        return [
            a.replace("TMP", str(folder)).replace("RUN", run).replace("CFG", config) for a in (argv or ["run", "CFG"])
        ]

    return build


def config_changed(dotted: str, value: Any) -> Callable[[Path, Servers | None], list[str]]:
    """A complete run, then the config edited (*dotted* set to *value*) and run again."""

    def build(folder: Path, srv: Servers | None) -> list[str]:
        _write_splits(folder)
        _cfg(folder, _base())
        _existing_run(folder)
        return ["run", _cfg(folder, _set(_base(), dotted, value))]

    return build


def _in_run(name: str, content: bytes | None) -> Callable[[Path], None]:
    """Write *content* to ``runs/bad/<name>`` (None: make it a folder, after removing the file)."""

    def mutate(folder: Path) -> None:
        path = folder / "runs" / "bad" / name
        if content is None:
            path.unlink(missing_ok=True)
            path.mkdir()
        else:
            path.write_bytes(content)

    return mutate


_BANK = {"schema_version": "shopsimrl-skillbank-v1", "skills": [{"skill_id": "s1", "content": "Check the budget."}]}


def _cut(path: Path) -> None:
    # a fixed cut (not half-way): the file's length varies with its timestamps, and so would the line
    path.write_bytes(path.read_bytes()[:40])


def plain_dir_verb(verb: str) -> Callable[[Path, Servers | None], list[str]]:
    """*verb* given a directory that holds no run (a notes folder)."""

    def build(folder: Path, srv: Servers | None) -> list[str]:
        return [verb, *plain_dir(folder, srv)[1:]]

    return build


_TRAIN_SPLITS = {
    "schema_version": "shopsimrl-persona-splits-v1",
    "version": "bad-training-v1",
    "splits": {"train": {"role": "train", "persona": True, "task_ids": [1, 2]},
               "test": {"role": "test", "persona": True, "task_ids": [4]}},
}


def training_case(
    training: dict[str, Any] | None = None,
    *,
    split: str = "train",
    task_lines: tuple[tuple[int, str], ...] = ((1, "train"), (2, "train")),
) -> Callable[[Path, Servers | None], list[str]]:
    """`shopsimrl training preflight` of a training YAML over the sandbox, valid but for *training*'s dotted keys,
    the evaluation's split and the task data's ``(task_id, split)`` lines."""

    def build(folder: Path, srv: Servers | None) -> list[str]:
        assert srv is not None
        (folder / "splits.json").write_text(json.dumps(_TRAIN_SPLITS), encoding="utf-8")
        _cfg(folder, _set(_base(srv), "tasks.split", split))
        lines = [json.dumps({"prompt": str(t), "metadata": {"schema_version": "shopsimrl-slime-tasks-v1",
                                                             "task_id": t, "split": name}}) for t, name in task_lines]
        (folder / "tasks.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        data: dict[str, Any] = {"evaluation": "eval.yaml", "out_dir": "train-out", "task_data": "tasks.jsonl",
                                "backend": {"kind": "vllm-chat"}}
        for dotted, value in (training or {}).items():
            _set(data, dotted, value(srv) if callable(value) else value)
        (folder / "training.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
        return ["training", "preflight", str(folder / "training.yaml")]

    return build


def tokenizer_folder(chat_template: str | None) -> Callable[[Path], None]:
    """A real (tiny) tokenizer folder `tok/` that transformers loads offline, with *chat_template* (None: none)."""

    def make(folder: Path) -> None:
        from tokenizers import Tokenizer, models, pre_tokenizers

        (folder / "tok").mkdir()
        tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "ping": 1}, unk_token="[UNK]"))
        tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
        tokenizer.save(str(folder / "tok" / "tokenizer.json"))
        config: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]"}
        if chat_template is not None:
            config["chat_template"] = chat_template
        (folder / "tok" / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")

    return make


def tokenizer_case(chat_template: str | None) -> Callable[[Path, Servers | None], list[str]]:
    """`training preflight` with `backend.kind: sglang-generate` and the tokenizer of :func:`tokenizer_folder`."""
    inner = training_case({"backend.kind": "sglang-generate", "backend.tokenizer": "tok"})

    def build(folder: Path, srv: Servers | None) -> list[str]:
        argv = inner(folder, srv)
        tokenizer_folder(chat_template)(folder)
        return argv

    return build


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
    # --- wrong types, nulls and nesting, section by section
    Case("experiment-null", "`experiment: null`", config_case("experiment", None), 2, "config-invalid"),
    Case("experiment-list", "`experiment:` a list", config_case("experiment", ["bad", 1]), 2, "config-invalid"),
    Case("output-dir-int", "`experiment.output_dir: 5`", config_case("experiment.output_dir", 5), 2, "config-invalid"),
    Case(
        "output-dir-null",
        "`experiment.output_dir: null`",
        config_case("experiment.output_dir", None),
        2,
        "config-invalid",
    ),
    Case("name-int", "`experiment.name: 2024` (a number)", config_case("experiment.name", 2024), 2, "config-invalid"),
    Case("seed-string", '`experiment.seed: "abc"`', config_case("experiment.seed", "abc"), 2, "config-invalid"),
    Case("seed-null", "`experiment.seed: null`", config_case("experiment.seed", None), 2, "config-invalid"),
    Case(
        "concurrency-negative",
        "`experiment.concurrency: -4`",
        config_case("experiment.concurrency", -4),
        2,
        "config-invalid",
    ),
    Case(
        "concurrency-float",
        "`experiment.concurrency: 2.5`",
        config_case("experiment.concurrency", 2.5),
        2,
        "config-invalid",
    ),
    Case(
        "spacing-too-long",
        "`experiment.start_spacing_seconds: 120`",
        config_case("experiment.start_spacing_seconds", 120),
        2,
        "config-invalid",
    ),
    Case(
        "outage-string",
        '`experiment.outage_budget_seconds: "5m"`',
        config_case("experiment.outage_budget_seconds", "5m"),
        2,
        "config-invalid",
    ),
    Case(
        "total-attempts-string",
        '`experiment.max_total_attempts: "3"`',
        config_case("experiment.max_total_attempts", "3"),
        2,
        "config-invalid",
    ),
    Case("dotenv-int", "`experiment.dotenv: 5`", config_case("experiment.dotenv", 5), 2, "config-invalid"),
    Case(
        "ledger-list",
        "`experiment.test_access_ledger: []`",
        config_case("experiment.test_access_ledger", []),
        2,
        "config-invalid",
    ),
    Case(
        "split-under-experiment",
        "`split: val` nested under `experiment` instead of `tasks`",
        config_case("experiment.split", "val"),
        2,
        "config-invalid",
    ),
    Case("tasks-null", "`tasks: null`", config_case("tasks", None), 2, "config-invalid"),
    Case(
        "tasks-string",
        "`tasks: splits.json` (a string, not a mapping)",
        config_case("tasks", "splits.json"),
        2,
        "config-invalid",
    ),
    Case("split-int", "`tasks.split: 2024` (a number)", config_case("tasks.split", 2024), 2, "config-invalid"),
    Case("split-null", "`tasks.split: null`", config_case("tasks.split", None), 2, "config-invalid"),
    Case("split-file-null", "`tasks.split_file: null`", config_case("tasks.split_file", None), 2, "config-invalid"),
    Case(
        "split-file-list",
        "`tasks.split_file: [a.json, b.json]`",
        config_case("tasks.split_file", ["a.json", "b.json"]),
        2,
        "config-invalid",
    ),
    Case(
        "split-file-url",
        "`tasks.split_file` an https URL",
        config_case("tasks.split_file", "https://example.org/splits.json"),
        2,
        "config-invalid",
    ),
    Case("sample-negative", "`tasks.sample_size: -1`", config_case("tasks.sample_size", -1), 2, "config-invalid"),
    Case("sample-float", "`tasks.sample_size: 2.5`", config_case("tasks.sample_size", 2.5), 2, "config-invalid"),
    Case("sample-all", '`tasks.sample_size: "all"`', config_case("tasks.sample_size", "all"), 2, "config-invalid"),
    Case("repeats-string", '`tasks.repeats: "3"`', config_case("tasks.repeats", "3"), 2, "config-invalid"),
    Case("repeats-negative", "`tasks.repeats: -2`", config_case("tasks.repeats", -2), 2, "config-invalid"),
    Case("tasks-splits-typo", "typo `tasks.splits`", config_case("tasks.splits", "val"), 2, "config-invalid"),
    Case(
        "tasks-inline-ids",
        "task ids listed in the config (`tasks.task_ids: [1, 2]`)",
        config_case("tasks.task_ids", [1, 2]),
        2,
        "config-invalid",
    ),
    Case("environment-null", "`environment: null`", config_case("environment", None), 2, "config-invalid"),
    Case(
        "env-url-null", "`environment.base_url: null`", config_case("environment.base_url", None), 2, "config-invalid"
    ),
    Case(
        "env-url-int",
        "`environment.base_url: 5700` (a port)",
        config_case("environment.base_url", 5700),
        2,
        "config-invalid",
    ),
    Case("env-url-typo", "typo `environment.url`", config_case("environment.url", "http://x"), 2, "config-invalid"),
    Case(
        "env-timeout-string",
        '`environment.timeout: "30s"`',
        config_case("environment.timeout", "30s"),
        2,
        "config-invalid",
    ),
    Case(
        "env-timeout-null", "`environment.timeout: null`", config_case("environment.timeout", None), 2, "config-invalid"
    ),
    Case(
        "env-connections-float",
        "`environment.max_connections: 1.5`",
        config_case("environment.max_connections", 1.5),
        2,
        "config-invalid",
    ),
    Case(
        "env-base-urls-string",
        "`environment.base_urls` a string, not a list",
        config_case("environment.base_urls", "http://127.0.0.1:5700"),
        2,
        "config-invalid",
    ),
    Case(
        "env-base-urls-duplicate",
        "`environment.base_urls` lists one server twice",
        config_case("environment.base_urls", ["http://127.0.0.1:5700", "http://127.0.0.1:5700/"]),
        2,
        "config-invalid",
    ),
    Case(
        "env-base-urls-ftp",
        "`environment.base_urls: [ftp://…]`",
        config_case("environment.base_urls", ["ftp://127.0.0.1:5700"]),
        2,
        "config-invalid",
    ),
    Case(
        "env-exclusive-string",
        '`environment.exclusive: "yes"`',
        config_case("environment.exclusive", "yes"),
        2,
        "config-invalid",
    ),
    Case(
        "env-call-retries-zero",
        "`environment.call_retry_attempts: 0`",
        config_case("environment.call_retry_attempts", 0),
        2,
        "config-invalid",
    ),
    Case(
        "env-keepalive-zero",
        "`environment.keepalive_expiry_seconds: 0`",
        config_case("environment.keepalive_expiry_seconds", 0),
        2,
        "config-invalid",
    ),
    Case(
        "env-identity-empty", '`environment.identity: ""`', config_case("environment.identity", ""), 2, "config-invalid"
    ),
    Case("env-persona-int", "`environment.persona: 1`", config_case("environment.persona", 1), 2, "config-invalid"),
    Case("max-steps-string", '`runtime.max_steps: "30"`', config_case("runtime.max_steps", "30"), 2, "config-invalid"),
    Case("max-steps-null", "`runtime.max_steps: null`", config_case("runtime.max_steps", None), 2, "config-invalid"),
    Case("runtime-list", "`runtime: [30]`", config_case("runtime", [30]), 2, "config-invalid"),
    Case("prompt-null", "`prompt: null`", config_case("prompt", None), 2, "config-invalid"),
    Case("prompt-int", "`prompt.system_prompt: 5`", config_case("prompt.system_prompt", 5), 2, "config-invalid"),
    Case("prompt-language-null", "`prompt.language: null`", config_case("prompt.language", None), 2, "config-invalid"),
    Case(
        "prompt-file-dir",
        "`prompt.system_prompt_file` names a directory",
        with_file("prompts", None, prompt__system_prompt_file="prompts"),
        2,
        "config-invalid",
    ),
    Case(
        "prompt-file-not-utf8",
        "`prompt.system_prompt_file` in GB18030, not UTF-8",
        with_file("p.txt", "你是购物助手。".encode("gb18030"), prompt__system_prompt_file="p.txt"),
        2,
        "config-invalid",
    ),
    Case(
        "prompt-texts-missing",
        "`prompt.prompt_texts_file` names a missing file",
        config_case("prompt.prompt_texts_file", "texts.json"),
        2,
        "config-invalid",
    ),
    Case(
        "prompt-texts-not-json",
        "`prompt.prompt_texts_file` is not JSON",
        with_file("texts.json", b"tools: [search]\n", prompt__prompt_texts_file="texts.json"),
        2,
        "config-invalid",
    ),
    Case(
        "prompt-texts-list",
        "`prompt.prompt_texts_file` holds a JSON list",
        with_file("texts.json", b'["search", "click"]', prompt__prompt_texts_file="texts.json"),
        2,
        "config-invalid",
    ),
    Case("skills-max-all", '`skills.max_skills: "all"`', config_case("skills.max_skills", "all"), 2, "config-invalid"),
    Case(
        "skills-dir",
        "`skills.path` names a directory",
        with_file("bank", None, skills__path="bank"),
        2,
        "config-invalid",
    ),
    Case(
        "skills-not-json",
        "`skills.path` file is not JSON",
        with_file("bank.json", b"- skill: check the budget\n", skills__path="bank.json"),
        2,
        "config-invalid",
    ),
    Case(
        "skills-empty-file",
        "`skills.path` file is empty",
        with_file("bank.json", b"", skills__path="bank.json"),
        2,
        "config-invalid",
    ),
    Case(
        "skills-wrong-schema",
        "`skills.path` file of another schema (`schema_version: v2`)",
        with_file("bank.json", json.dumps({**_BANK, "schema_version": "v2"}).encode(), skills__path="bank.json"),
        2,
        "config-invalid",
    ),
    Case(
        "skills-blank-content",
        "a SkillBank record with blank `content`",
        with_file(
            "bank.json",
            json.dumps({**_BANK, "skills": [{"skill_id": "s1", "content": "  "}]}).encode(),
            skills__path="bank.json",
        ),
        2,
        "config-invalid",
    ),
    Case("model-null", "`model: null`", config_case("model", None), 2, "config-invalid"),
    Case(
        "model-as-list",
        "`model:` a list of one mapping",
        config_case("model", [{"name": "served", "base_url": "http://127.0.0.1:9/v1"}]),
        2,
        "config-invalid",
    ),
    Case("model-name-null", "`model.name: null`", config_case("model.name", None), 2, "config-invalid"),
    Case("model-name-int", "`model.name: 7` (a number)", config_case("model.name", 7), 2, "config-invalid"),
    Case("model-url-null", "`model.base_url: null`", config_case("model.base_url", None), 2, "config-invalid"),
    Case(
        "temperature-string", '`model.temperature: "0.7"`', config_case("model.temperature", "0.7"), 2, "config-invalid"
    ),
    Case(
        "temperature-negative", "`model.temperature: -0.1`", config_case("model.temperature", -0.1), 2, "config-invalid"
    ),
    Case("top-p-high", "`model.top_p: 1.5`", config_case("model.top_p", 1.5), 2, "config-invalid"),
    Case("max-tokens-float", "`model.max_tokens: 1.5`", config_case("model.max_tokens", 1.5), 2, "config-invalid"),
    Case("api-key-env-empty", '`model.api_key_env: ""`', config_case("model.api_key_env", ""), 2, "config-invalid"),
    Case("api-key-env-int", "`model.api_key_env: 5`", config_case("model.api_key_env", 5), 2, "config-invalid"),
    Case(
        "extra-body-string",
        '`model.extra_body: "enable_thinking"`',
        config_case("model.extra_body", "enable_thinking"),
        2,
        "config-invalid",
    ),
    Case(
        "model-transport-streams",
        "`model.http_transport: streams` (removed)",
        config_case("model.http_transport", "streams"),
        2,
        "config-invalid",
    ),
    Case(
        "model-base-urls-duplicate",
        "`model.base_urls` lists one replica twice",
        config_case("model.base_urls", ["http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1"]),
        2,
        "config-invalid",
    ),
    Case(
        "replica-in-flight-zero",
        "`model.replica_max_in_flight: 0`",
        config_case("model.replica_max_in_flight", 0),
        2,
        "config-invalid",
    ),
    Case(
        "replica-probe-zero",
        "`model.replica_probe_seconds: 0`",
        config_case("model.replica_probe_seconds", 0),
        2,
        "config-invalid",
    ),
    Case(
        "backoff-negative",
        "`model.retry_backoff_seconds: -1`",
        config_case("model.retry_backoff_seconds", -1),
        2,
        "config-invalid",
    ),
    Case(
        "send-seed-string", '`model.send_seed: "false"`', config_case("model.send_seed", "false"), 2, "config-invalid"
    ),
    Case("seed-mod-int", "`model.seed_mod_2_32: 1`", config_case("model.seed_mod_2_32", 1), 2, "config-invalid"),
    Case("trust-env-null", "`model.trust_env: null`", config_case("model.trust_env", None), 2, "config-invalid"),
    Case(
        "checkpoint-id-empty", '`model.checkpoint_id: ""`', config_case("model.checkpoint_id", ""), 2, "config-invalid"
    ),
    Case(
        "model-sampling-nested",
        "`model.sampling: {temperature: 0.7}` (sampling keys sit in `model` itself)",
        config_case("model.sampling", {"temperature": 0.7}),
        2,
        "config-invalid",
    ),
    Case("serve-true", "`serve: true`", config_case("serve", True), 2, "config-invalid"),
    Case(
        "serve-unknown-server",
        "`serve.server: tgi`",
        config_case("serve", {"server": "tgi", "weights": "w"}),
        2,
        "config-invalid",
    ),
    Case(
        "serve-no-weights", "`serve` without `weights`", config_case("serve", {"server": "vllm"}), 2, "config-invalid"
    ),
    Case(
        "serve-custom-no-command",
        "`serve.server: custom` without `command`",
        config_case("serve", {"server": "custom", "weights": "w"}),
        2,
        "config-invalid",
    ),
    Case(
        "serve-command-empty",
        "`serve.command: []`",
        config_case("serve", {"server": "custom", "weights": "w", "command": []}),
        2,
        "config-invalid",
    ),
    Case(
        "serve-gpus-string",
        '`serve.gpus: "0,1"` (a string, not a list)',
        config_case("serve", {"server": "vllm", "weights": "w", "gpus": "0,1"}),
        2,
        "config-invalid",
    ),
    Case(
        "serve-gpus-per-server-negative",
        "`serve.gpus_per_server: -1`",
        config_case("serve", {"server": "vllm", "weights": "w", "gpus_per_server": -1}),
        2,
        "config-invalid",
    ),
    Case(
        "serve-env-int",
        "`serve.env: {OMP_NUM_THREADS: 4}` (a number, not a string)",
        config_case("serve", {"server": "vllm", "weights": "w", "env": {"OMP_NUM_THREADS": 4}}),
        2,
        "config-invalid",
    ),
    Case(
        "serve-start-timeout-zero",
        "`serve.start_timeout: 0`",
        config_case("serve", {"server": "vllm", "weights": "w", "start_timeout": 0}),
        2,
        "config-invalid",
    ),
    Case(
        "serve-extra-args-string",
        '`serve.extra_args: "--max-model-len 8192"` (a string, not a list)',
        config_case("serve", {"server": "vllm", "weights": "w", "extra_args": "--max-model-len 8192"}),
        2,
        "config-invalid",
    ),
    Case(
        "serve-port",
        "`serve.port: 8000` (the port is always a free one)",
        config_case("serve", {"server": "vllm", "weights": "w", "port": 8000}),
        2,
        "config-invalid",
    ),
    Case(
        "config-tab-indent",
        "a YAML line indented with a tab",
        yaml_case(_valid_yaml().replace("  split: val\n", "\tsplit: val\n")),
        2,
        "config-invalid",
    ),
    Case(
        "config-nul-byte",
        "a NUL byte in the config",
        yaml_case(_valid_yaml().replace("name: bad", "name: b\x00ad")),
        2,
        "config-invalid",
    ),
    Case(
        "config-is-split-file",
        "the split file passed as the config",
        lambda f, s: (_write_splits(f), ["run", str(f / "splits.json")])[1],
        2,
        "config-invalid",
    ),
    Case(
        "config-parent-is-file",
        "config path under a file (`notes.txt/eval.yaml`)",
        lambda f, s: ((f / "notes.txt").write_text("x\n"), ["run", str(f / "notes.txt" / "eval.yaml")])[1],
        6,
        "input-not-a-file",
    ),
    # --- .env files
    Case(
        "dotenv-not-utf8",
        "a `.env` file in Latin-1",
        with_file("secrets.env", "TOKEN=café\n".encode("latin-1"), experiment__dotenv="secrets.env"),
        2,
        "dotenv-missing",
    ),
    Case(
        "dotenv-is-dir",
        "`experiment.dotenv` names a directory",
        with_file("envdir", None, experiment__dotenv="envdir"),
        2,
        "config-invalid",
    ),
    Case(
        "dotenv-digit-name", "a `.env` name starting with a digit (`1X=1`)", dotenv_case("1X=1\n"), 2, "dotenv-invalid"
    ),
    Case("dotenv-empty-name", "a `.env` line `=value`", dotenv_case("=value\n"), 2, "dotenv-invalid"),
    Case(
        "dotenv-single-quote",
        "a `.env` value opening a single quote it never closes",
        dotenv_case("TOKEN='s3cret\n"),
        2,
        "dotenv-invalid",
    ),
    Case("dotenv-export-only", "a `.env` line `export` alone", dotenv_case("export\n"), 2, "dotenv-invalid"),
    Case("dotenv-nul", "a NUL byte in a `.env` value", dotenv_case("TOKEN=a\x00b\n"), 2, "dotenv-invalid"),
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
    Case(
        "split-comments",
        "split file with `//` comments (JSON has none)",
        split_case(raw=b"// frozen 2026-08\n" + _SPLITS_JSON.encode()),
        2,
        "split-invalid",
    ),
    Case(
        "split-trailing-garbage",
        "split file with text after the JSON",
        split_case(raw=_SPLITS_JSON.encode() + b"\n}\n# end\n"),
        2,
        "split-invalid",
    ),
    Case("split-empty-file", "split file is empty (0 bytes)", split_case(raw=b""), 2, "split-invalid"),
    Case("split-json-null", "split file is `null`", split_case(raw=b"null"), 2, "split-invalid"),
    Case(
        "split-no-splits-key",
        "split file without the `splits` key (splits at the top level)",
        split_case(lambda d: d["splits"]),
        2,
        "split-invalid",
    ),
    Case("splits-empty", "`splits: {}`", split_case(lambda d: d.update(splits={})), 2, "split-unknown"),
    Case(
        "split-body-null", "a split is `null`", split_case(lambda d: d["splits"].update(val=None)), 2, "split-invalid"
    ),
    Case("task-id-huge", "task id 2⁷⁰", split_case(lambda d: _val(d).update(task_ids=[1, 2**70])), 2, "split-invalid"),
    Case(
        "task-ids-strings",
        'task ids as strings (`["1", "2"]`)',
        split_case(lambda d: _val(d).update(task_ids=["1", "2"])),
        2,
        "split-invalid",
    ),
    Case(
        "task-id-null", "task id `null`", split_case(lambda d: _val(d).update(task_ids=[1, None])), 2, "split-invalid"
    ),
    Case(
        "task-ids-nested",
        "task ids nested in a list (`[[1, 2]]`)",
        split_case(lambda d: _val(d).update(task_ids=[[1, 2]])),
        2,
        "split-invalid",
    ),
    Case(
        "task-id-exponent",
        "task id `1e3` (a JSON float)",
        split_case(raw=_SPLITS_JSON.replace("[1, 2, 3]", "[1, 1e3]").encode()),
        2,
        "split-invalid",
    ),
    Case(
        "task-id-nan",
        "task id `NaN`",
        split_case(raw=_SPLITS_JSON.replace("[1, 2, 3]", "[1, NaN]").encode()),
        2,
        "split-invalid",
    ),
    Case(
        "task-ids-null",
        "`task_ids: null`",
        split_case(lambda d: _val(d).update(task_ids=None)),
        2,
        "split-invalid",
    ),
    Case(
        "range-negative-start",
        "legacy range with `start: -5`",
        split_case(lambda d: d["splits"].update(val={"start": -5, "end": 2, "persona": True})),
        2,
        "split-invalid",
    ),
    Case(
        "range-strings",
        'legacy range with `start: "0"`, `end: "10"`',
        split_case(lambda d: d["splits"].update(val={"start": "0", "end": "10", "persona": True})),
        2,
        "split-invalid",
    ),
    Case(
        "range-no-end",
        "legacy range with `start` only",
        split_case(lambda d: d["splits"].update(val={"start": 0, "persona": True})),
        2,
        "split-invalid",
    ),
    Case(
        "range-huge",
        "legacy range `0 … 10¹²` (a trillion ids)",
        split_case(lambda d: d["splits"].update(val={"start": 0, "end": 10**12, "persona": True})),
        2,
        "split-invalid",
    ),
    Case(
        "split-count-bool",
        "`task_count: true`",
        split_case(lambda d: _val(d).update(task_count=True)),
        2,
        "split-invalid",
    ),
    Case(
        "split-hash-int",
        "`task_ids_sha256: 5`",
        split_case(lambda d: _val(d).update(task_ids_sha256=5)),
        2,
        "split-invalid",
    ),
    Case(
        "split-persona-contradicts-config",
        "`persona: false` in the split, `environment.persona: true` in the config",
        lambda f, s: (
            _write_splits(f, {**SPLITS, "splits": {"val": {"persona": False, "task_ids": [1, 2]}}}),
            ["run", _cfg(f, _set(_base(), "environment.persona", True))],
        )[1],
        2,
        "config-invalid",
    ),
    Case(
        "split-persona-unset",
        "`persona: null` in the split and in the config",
        split_case(lambda d: _val(d).update(persona=None)),
        2,
        "config-invalid",
    ),
    Case(
        "split-sample-test-guard",
        "`run` on a split named `test` without a role, without `--allow-test-split`",
        lambda f, s: (
            _write_splits(f, {**SPLITS, "splits": {"test": {"persona": True, "task_ids": [1, 2]}}}),
            ["run", _cfg(f, _set(_base(), "tasks.split", "test"))],
        )[1],
        2,
        "test-split-not-opted-in",
    ),
    Case(
        "split-test-task-in-val",
        "a test task added to val, val's `task_ids_sha256` dropped",
        split_case(lambda d: _val(d).update(task_ids=[1, 2, 3, 5])),
        2,
        "split-invalid",
    ),
    Case(
        "split-test-task-in-val-no-checks",
        "`plan` of a test task added to val of a file without `checks`",
        lambda f, s: ["plan", *split_case(lambda d: _val(d).update(task_ids=[4, 1]))(f, s)[1:]],
        2,
        "split-invalid",
    ),
    Case(
        "split-checks-not-disjoint",
        "val and another split share a task under `checks.pairwise_task_disjoint: true`",
        split_case(
            lambda d: d.update(
                checks={"pairwise_task_disjoint": True}, splits={**d["splits"], "more": {"task_ids": [3]}}
            ),
        ),
        2,
        "split-invalid",
    ),
    Case(
        "registry-id-too-long",
        "`registry add --id` of 300 characters",
        lambda f, s: ["add", "--id", "a" * 300, "--step", "1", "--registry", str(f / "registry")],
        2,
        "checkpoint-registry-invalid",
        program="shopsimrl-registry",
    ),
    Case(
        "serve-state-dir-file",
        "`serve.state_dir` names a file",
        with_file("notes.txt", b"x\n", serve={"server": "vllm", "weights": "w", "state_dir": "notes.txt"}),
        2,
        "config-invalid",
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
    Case("manifest-array", "`manifest.json` is a JSON list", run_dir_case(manifest=b"[]"), 2, "manifest-invalid"),
    Case("manifest-null", "`manifest.json` is `null`", run_dir_case(manifest=b"null"), 2, "manifest-invalid"),
    Case("manifest-empty", "`manifest.json` is empty (0 bytes)", run_dir_case(manifest=b""), 2, "manifest-invalid"),
    Case(
        "manifest-nul",
        "`manifest.json` starting with NUL bytes",
        run_dir_case(manifest=b"\x00\x00garbage{"),
        2,
        "manifest-invalid",
    ),
    Case(
        "manifest-no-plan",
        "`manifest.json` without a `plan`",
        run_dir_case(manifest=b'{"schema_version": "shopsimrl-run-manifest-v1", "jobs": []}'),
        2,
        "manifest-invalid",
    ),
    Case(
        "manifest-foreign",
        "`manifest.json` of another tool (`schema_version: mlflow-run-v1`)",
        run_dir_case(manifest=b'{"schema_version": "mlflow-run-v1", "plan": {}, "run_id": "abc"}'),
        2,
        "manifest-invalid",
    ),
    Case(
        "manifest-truncated",
        "`manifest.json` cut off after 40 bytes",
        after_run(lambda f: _cut(f / "runs" / "bad" / "manifest.json")),
        2,
        "manifest-invalid",
    ),
    Case(
        "traces-is-dir",
        "`traces.jsonl` is a directory",
        after_run(_in_run("traces.jsonl", None)),
        6,
        "path-wrong-type",
    ),
    Case("run-lock-is-dir", "`run.lock` is a directory", run_dir_case(lock_is_dir=True), 6, "path-wrong-type"),
    Case(
        "run-dir-is-file",
        "the run folder (`output_dir/name`) is a file",
        lambda f, s: (
            _write_splits(f),
            (f / "runs").mkdir(),
            (f / "runs" / "bad").write_text("not a folder\n"),
            ["run", _cfg(f, _base())],
        )[3],
        6,
        "path-wrong-type",
    ),
    Case(
        "output-dir-under-file",
        "`experiment.output_dir: notes.txt/runs` (under a file)",
        with_file("notes.txt", b"x\n", experiment__output_dir="notes.txt/runs"),
        6,
        "path-wrong-type",
    ),
    Case(
        "config-edited-temperature",
        "the config edited after a run: `model.temperature` 0 → 0.7",
        config_changed("model.temperature", 0.7),
        2,
        "fingerprint-mismatch",
    ),
    Case(
        "config-edited-repeats",
        "the config edited after a run: `tasks.repeats` 1 → 2",
        config_changed("tasks.repeats", 2),
        2,
        "fingerprint-mismatch",
    ),
    Case(
        "manifest-split-edited",
        "`manifest.json` edited by hand: the split's name",
        edited_manifest(lambda m: m["plan"]["task_split"].update(name="train")),
        2,
        "fingerprint-mismatch",
    ),
    Case(
        "manifest-symlink",
        "`manifest.json` is a symbolic link",
        linked("manifest.json"),
        2,
        "run-dir-symlink",
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
    Case("verb-typo", "`shopsimrl summarise` (British spelling)", cli("summarise", "TMP"), 2, "usage"),
    Case("run-two-configs", "`run a.yaml b.yaml`", cli("run", "TMP/a.yaml", make_config=True), 2, "usage"),
    Case(
        "max-attempts-negative",
        "`--max-attempts -3`",
        cli("run", "--max-attempts", "-3", make_config=True),
        2,
        "usage",
    ),
    Case(
        "max-attempts-float", "`--max-attempts 2.5`", cli("run", "--max-attempts", "2.5", make_config=True), 2, "usage"
    ),
    Case("run-config-empty", '`run ""` (an empty path)', cli("run", ""), 2, "input-missing"),
    Case("plan-missing", "`plan` of a missing config", cli("plan", "TMP/nope.yaml"), 2, "input-missing"),
    Case("plan-dir", "`plan` of a directory", cli("plan", "TMP"), 6, "input-not-a-file"),
    Case(
        "retry-failed-resume-flag",
        "`retry-failed --no-resume` (a flag of `run` only)",
        cli("retry-failed", "--no-resume", make_config=True),
        2,
        "usage",
    ),
    Case(
        "retry-failed-missing",
        "`retry-failed` of a missing config",
        cli("retry-failed", "TMP/x.yaml"),
        2,
        "input-missing",
    ),
    Case(
        "summarize-requested-word",
        "`summarize --requested all`",
        cli("summarize", "TMP", "--requested", "all"),
        2,
        "usage",
    ),
    Case("summarize-two-dirs", "`summarize` of two directories", cli("summarize", "TMP", "TMP"), 2, "usage"),
    Case(
        "compare-plain-dirs",
        "`compare` of two directories that hold no run",
        lambda f, s: ((f / "a").mkdir(), (f / "b").mkdir(), ["compare", str(f / "a"), str(f / "b")])[2],
        2,
        "run-dir-missing",
    ),
    Case(
        "compare-bootstrap-word",
        "`compare --bootstrap-samples many`",
        cli("compare", "TMP/a", "TMP/b", "--bootstrap-samples", "many"),
        2,
        "usage",
    ),
    Case(
        "compare-seed-word",
        "`compare --bootstrap-seed abc`",
        cli("compare", "TMP/a", "TMP/b", "--bootstrap-seed", "abc"),
        2,
        "usage",
    ),
    Case(
        "compare-intended-unknown",
        "`compare --intended temperature`",
        cli("compare", "TMP/a", "TMP/b", "--intended", "temperature"),
        2,
        "usage",
    ),
    Case("compare-one-arg", "`compare` of one run", cli("compare", "TMP/a"), 2, "usage"),
    Case("power-missing", "`power` of a missing path", cli("power", "TMP/nope.json"), 2, "run-dir-missing"),
    Case("power-plain-dir", "`power` of a directory that holds no run", plain_dir_verb("power"), 2, "run-dir-missing"),
    Case(
        "power-not-comparison",
        "`power` of a JSON file that is no comparison",
        lambda f, s: ((f / "x.json").write_text('{"a": 1}'), ["power", str(f / "x.json")])[1],
        2,
        "document-invalid",
    ),
    Case(
        "power-not-json",
        "`power` of a file that is not JSON",
        lambda f, s: ((f / "x.json").write_text("reward: 0.5\n"), ["power", str(f / "x.json")])[1],
        2,
        "document-invalid",
    ),
    Case("power-alpha-high", "`power --alpha 1.5`", cli("power", "TMP", "--alpha", "1.5"), 2, "usage"),
    Case("power-power-zero", "`power --power 0`", cli("power", "TMP", "--power", "0"), 2, "usage"),
    Case("power-detect-negative", "`power --detect -0.1`", cli("power", "TMP", "--detect", "-0.1"), 2, "usage"),
    Case("power-tasks-zero", "`power --tasks 0`", cli("power", "TMP", "--tasks", "0"), 2, "usage"),
    Case("power-repeats-word", "`power --repeats two`", cli("power", "TMP", "--repeats", "two"), 2, "usage"),
    Case(
        "power-metric-unknown",
        "`power --metric accuracy` on a run",
        cli("power", "RUN", "--metric", "accuracy", make_run=True),
        2,
        "power-unknown-metric",
    ),
    Case("export-no-kind", "`export` without `traces` or `sft`", cli("export"), 2, "usage"),
    Case("export-kind-unknown", "`export csv`", cli("export", "csv", "TMP", "TMP/out"), 2, "usage"),
    Case(
        "export-missing",
        "`export traces` of a missing run",
        cli("export", "traces", "TMP/nope", "TMP/out.jsonl"),
        2,
        "run-dir-missing",
    ),
    Case(
        "export-profile-unknown",
        "`export traces --profile secret`",
        cli("export", "traces", "TMP", "TMP/out.jsonl", "--profile", "secret"),
        2,
        "usage",
    ),
    Case(
        "export-named-traces",
        "`export traces` to a file named `traces.jsonl`",
        cli("export", "traces", "RUN", "TMP/traces.jsonl", make_run=True),
        2,
        "config-invalid",
    ),
    Case(
        "export-out-is-dir",
        "`export traces` to a directory",
        cli("export", "traces", "RUN", "TMP", make_run=True),
        6,
        "path-wrong-type",
    ),
    Case("export-sft-one-path", "`export sft` with only one path", cli("export", "sft", "TMP/out.jsonl"), 2, "usage"),
    Case("labels-missing", "`labels` of a missing run", cli("labels", "TMP/nope"), 2, "run-dir-missing"),
    Case(
        "labels-plain-dir", "`labels` of a directory that holds no run", plain_dir_verb("labels"), 2, "run-dir-missing"
    ),
    Case(
        "labels-out-is-dir",
        "`labels --out` is a directory",
        cli("labels", "RUN", "--out", "TMP", make_run=True),
        6,
        "path-wrong-type",
    ),
    Case(
        "candidates-missing",
        "`candidates` of a missing run",
        cli("candidates", "TMP/nope", "TMP/out"),
        2,
        "run-dir-missing",
    ),
    Case(
        "candidates-support-zero",
        "`candidates --min-support 0`",
        cli("candidates", "TMP", "TMP/out", "--min-support", "0"),
        2,
        "usage",
    ),
    Case(
        "candidates-budget-word",
        "`candidates --active-skill-budget ten`",
        cli("candidates", "TMP", "TMP/out", "--active-skill-budget", "ten"),
        2,
        "usage",
    ),
    Case("gate-a-too-few", "`gate-a` with two of its four paths", cli("gate-a", "TMP/a.yaml", "TMP/bare"), 2, "usage"),
    Case(
        "gate-a-rule-unknown",
        "`gate-a --selection-rule best`",
        cli("gate-a", "TMP/a", "TMP/b", "TMP/c", "TMP/d", "--selection-rule", "best"),
        2,
        "usage",
    ),
    Case(
        "gate-a-bootstrap-zero",
        "`gate-a --bootstrap-samples 0`",
        cli("gate-a", "TMP/a", "TMP/b", "TMP/c", "TMP/d", "--bootstrap-samples", "0"),
        2,
        "usage",
    ),
    Case(
        "gate-a-missing",
        "`gate-a` of a missing config and run",
        cli("gate-a", "TMP/nope.yaml", "TMP/bare", "TMP/draft.json", "TMP/out"),
        2,
        "input-missing",
    ),
    Case(
        "pool-no-round",
        "`candidate-pool` without `--round-id`",
        cli("candidate-pool", "TMP/bank.json", "TMP/c.json", "TMP/pool.json", "--proposal-checkpoint", "c1"),
        2,
        "usage",
    ),
    Case(
        "pool-max-negative",
        "`candidate-pool --max-candidates -1`",
        cli(
            "candidate-pool",
            "TMP/bank.json",
            "TMP/c.json",
            "TMP/pool.json",
            "--round-id",
            "r1",
            "--proposal-checkpoint",
            "c1",
            "--max-candidates",
            "-1",
        ),
        2,
        "usage",
    ),
    Case(
        "pool-bank-missing",
        "`candidate-pool` of a missing SkillBank",
        cli(
            "candidate-pool",
            "TMP/bank.json",
            "TMP/c.json",
            "TMP/pool.json",
            "--round-id",
            "r1",
            "--proposal-checkpoint",
            "c1",
        ),
        2,
        "input-missing",
    ),
    Case(
        "online-gate-budget-zero",
        "`online-gate --active-skill-budget 0`",
        cli("online-gate", "TMP/a", "TMP/b", "TMP/c", "TMP/d", "--active-skill-budget", "0"),
        2,
        "usage",
    ),
    Case(
        "online-gate-missing",
        "`online-gate` of a missing config and pool",
        cli("online-gate", "TMP/nope.yaml", "TMP/bare", "TMP/pool.json", "TMP/out"),
        2,
        "input-missing",
    ),
    Case(
        "snapshot-missing",
        "`snapshot` of a missing SkillBank",
        cli("snapshot", "TMP/bank.json", "TMP/out"),
        2,
        "input-missing",
    ),
    Case(
        "snapshot-not-json",
        "`snapshot` of a SkillBank that is not JSON",
        lambda f, s: ((f / "bank.json").write_text("skills:\n"), ["snapshot", str(f / "bank.json"), str(f / "out")])[1],
        2,
        "config-invalid",
    ),
    Case(
        "snapshot-no-skills",
        "`snapshot` of a SkillBank without a `skills` list",
        lambda f, s: (
            (f / "bank.json").write_text('{"schema_version": "shopsimrl-skillbank-v1"}'),
            ["snapshot", str(f / "bank.json"), str(f / "out")],
        )[1],
        2,
        "config-invalid",
    ),
    Case(
        "snapshot-out-is-file",
        "`snapshot` into a path that is a file",
        lambda f, s: (
            (f / "bank.json").write_text(json.dumps(_BANK)),
            (f / "out").write_text("x"),
            ["snapshot", str(f / "bank.json"), str(f / "out")],
        )[2],
        6,
        "path-wrong-type",
    ),
    Case("view-missing", "`view` of a missing root", cli("view", "TMP/nope"), 2, "view-root-missing"),
    Case("view-port-word", "`view --port http`", cli("view", "TMP", "--port", "http"), 2, "usage"),
    Case("view-port-huge", "`view --port 70000`", cli("view", "TMP", "--port", "70000"), 2, "usage"),
    Case(
        "export-sft-missing",
        "`export sft` of a missing run",
        cli("export", "sft", "TMP/nope", "TMP/out.jsonl"),
        2,
        "run-dir-missing",
    ),
    Case(
        "candidates-out-is-file",
        "`candidates` into an output folder that is a file",
        after_run(lambda f: (f / "out").write_text("x\n"), ["candidates", "RUN", "TMP/out"]),
        6,
        "path-wrong-type",
    ),
    Case(
        "pool-candidates-missing",
        "`candidate-pool` of a missing candidates file",
        lambda f, s: (
            (f / "bank.json").write_text(json.dumps(_BANK)),
            [
                "candidate-pool",
                str(f / "bank.json"),
                str(f / "c.json"),
                str(f / "pool.json"),
                "--round-id",
                "r1",
                "--proposal-checkpoint",
                "c1",
            ],
        )[1],
        2,
        "input-missing",
    ),
    Case(
        "power-not-utf8",
        "`power` of a comparison file in Latin-1",
        lambda f, s: ((f / "x.json").write_bytes('{"note": "café"}'.encode("latin-1")), ["power", str(f / "x.json")])[
            1
        ],
        2,
        "document-invalid",
    ),
    Case(
        "summarize-manifest-garbage",
        "`summarize --no-write` of a run whose `manifest.json` is garbage",
        after_run(_in_run("manifest.json", b"\x00garbage{"), ["summarize", "--no-write", "RUN"]),
        2,
        "manifest-invalid",
    ),
    Case(
        "compare-manifest-garbage",
        "`compare` of a run whose `manifest.json` is garbage",
        after_run(_in_run("manifest.json", b"[1, 2"), ["compare", "RUN", "RUN"]),
        2,
        "manifest-invalid",
    ),
    Case("view-port-negative", "`view --port -1`", cli("view", "TMP", "--port", "-1"), 2, "usage"),
    Case("config-empty-mapping", "config `{}` (a mapping without sections)", yaml_case("{}\n"), 2, "config-invalid"),
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
    Case(
        "env-html",
        "environment URL answering 200 with an HTML page",
        server_case("environment.base_url", lambda s: s.html_url),
        2,
        "environment-unreachable",
        needs_servers=True,
    ),
    Case(
        "env-is-model-server",
        "environment URL pointing at the model server",
        server_case("environment.base_url", lambda s: s.policy_url[: -len("/v1")]),
        2,
        "environment-unreachable",
        needs_servers=True,
    ),
    Case(
        "env-url-with-endpoint-path",
        "environment URL ending in `/api/shop_agent`",
        server_case("environment.base_url", lambda s: s.env_url + "/api/shop_agent"),
        2,
        "environment-unreachable",
        needs_servers=True,
    ),
    Case(
        "model-is-env-server",
        "model URL pointing at the environment server",
        server_case("model.base_url", lambda s: s.env_url + "/v1"),
        2,
        "model-unreachable",
        needs_servers=True,
    ),
    Case(
        "model-url-v2",
        "model URL ending in `/v2`",
        server_case("model.base_url", lambda s: s.policy_url[: -len("/v1")] + "/v2"),
        2,
        "model-unreachable",
        needs_servers=True,
    ),
    Case(
        "model-name-case",
        "`model.name` in the wrong case",
        server_case("model.name", lambda s: s.served_model.upper()),
        2,
        "model-not-served",
        needs_servers=True,
    ),
    Case(
        "env-https-to-http",
        "`https://` environment URL of a plain-HTTP server",
        server_case("environment.base_url", lambda s: s.env_url.replace("http://", "https://")),
        2,
        "environment-unreachable",
        needs_servers=True,
    ),
    Case(
        "model-https-to-http",
        "`https://` model URL of a plain-HTTP server",
        server_case("model.base_url", lambda s: s.policy_url.replace("http://", "https://")),
        2,
        "model-unreachable",
        needs_servers=True,
    ),
    Case(
        "model-http-to-tls",
        "`http://` model URL of an HTTPS server",
        server_case("model.base_url", lambda s: s.tls_url.replace("https://", "http://") + "/v1"),
        2,
        "model-unreachable",
        needs_servers=True,
    ),
    # --- training (issue 30): `shopsimrl training preflight`, one line per problem
    Case("training-top-p", "training `sampling.top_p: 0.9` with exact tokens (the kept set cannot be replayed)",
         training_case({"sampling.top_p": 0.9}), 2, "training-preflight", needs_servers=True),
    Case("training-top-k", "training `sampling.top_k: 50` with exact tokens",
         training_case({"sampling.top_k": 50}), 2, "training-preflight", needs_servers=True),
    Case("training-no-logprobs", "training backend that answers without token ids or logprobs (an HTML page)",
         training_case({"backend.base_url": lambda s: s.html_url}), 2, "training-preflight", needs_servers=True),
    Case("training-tokenizer-missing", "training `backend.kind: sglang-generate` with a tokenizer folder that "
         "does not exist", training_case({"backend.kind": "sglang-generate", "backend.tokenizer": "no-such-folder"}),
         2, "training-preflight", needs_servers=True),
    Case("training-test-split", "training on the test split (guarded)",
         training_case(split="test", task_lines=((4, "test"),)), 2, "training-preflight", needs_servers=True),
    Case("training-test-task", "training task data holding a test task",
         training_case(task_lines=((1, "train"), (2, "train"), (4, "train"))), 2, "training-preflight",
         needs_servers=True),
    Case("training-task-missing", "training task data missing a frozen train task",
         training_case(task_lines=((1, "train"),)), 2, "training-preflight", needs_servers=True),
    Case("training-template-no-tools", "training tokenizer whose chat template drops the tools",
         tokenizer_case("{% for m in messages %}{{ m['content'] }}\n{% endfor %}"), 2, "training-preflight",
         needs_servers=True),
    Case("training-no-chat-template", "training tokenizer without a chat template",
         tokenizer_case(None), 2, "training-preflight", needs_servers=True),
    Case("training-group-size", "training `group_size: 0`",
         training_case({"group_size": 0}), 2, "config-invalid", needs_servers=True),
    Case("training-unknown-key", "training config with a misspelt key (`group_sise`)",
         training_case({"group_sise": 4}), 2, "config-invalid", needs_servers=True),
    # --- serving checkpoints (issue 32): registry values are names and paths, never flags
    Case("serve-weights-missing", "`serve.weights` a relative path that does not exist (a typo, not a hub id)",
         config_case("serve", {"server": "vllm", "weights": "ckpts/step-00100"}), 2, "weights-missing"),
    Case("serve-weights-flag", "`serve.weights: --trust-remote-code`",
         config_case("serve", {"server": "vllm", "weights": "--trust-remote-code"}), 2, "config-invalid"),
    Case("serve-gpus-twice", '`serve.gpus: ["0", "0"]` (a device listed twice)',
         config_case("serve", {"server": "vllm", "weights": "w", "gpus": ["0", "0"]}), 2, "config-invalid"),
    Case("registry-weights-missing", "`registry add --weights` a path that does not exist",
         lambda f, s: ["add", "--id", "c1", "--step", "1", "--weights", str(f / "no-such-ckpt"),
                       "--registry", str(f / "registry")], 2, "checkpoint-registry-invalid",
         program="shopsimrl-registry"),
    Case("registry-weights-flag", "`registry add --weights=--trust-remote-code`",
         lambda f, s: ["add", "--id", "c1", "--step", "1", "--weights=--trust-remote-code",
                       "--registry", str(f / "registry")], 2, "checkpoint-registry-invalid",
         program="shopsimrl-registry"),
    Case("registry-base-model-flag", "`registry add --adapter DIR --base-model=--trust-remote-code`",
         lambda f, s: ["add", "--id", "c1", "--step", "1", "--adapter", str(f), "--base-model=--trust-remote-code",
                       "--registry", str(f / "registry")], 2, "checkpoint-registry-invalid",
         program="shopsimrl-registry"),
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
    from shopsimrl_core.cli._main import main as shopsimrl_main
    from shopsimrl_dagster.registry import main as registry_main

    main = registry_main if case.program == "shopsimrl-registry" else shopsimrl_main

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
            except Exception:  # an escaped exception is a failed case: its traceback is the stderr shown
                import traceback

                traceback.print_exc(file=err)
                code = -1
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
    with threaded_server(_Html) as port:
        yield f"http://127.0.0.1:{port}/v1"


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


@contextlib.contextmanager
def tls_server() -> Iterator[tuple[str, Path]]:
    """A real HTTPS server on a free loopback port with a self-signed certificate; yields its URL and the
    certificate (the CA a client would need)."""
    import ssl
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tls-") as tmp:
        cert, key = make_certificate(Path(tmp))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)

        def wrap(server: ThreadingHTTPServer) -> None:
            server.socket = context.wrap_socket(server.socket, server_side=True)

        with threaded_server(_Tls, wrap=wrap) as port:
            yield f"https://127.0.0.1:{port}", cert


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

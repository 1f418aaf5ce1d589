#!/usr/bin/env bash
# Runs a command while busy loops keep every core busy, as a loaded CI machine would (issue 24,
# acceptance 4: the whole suite passes on a fresh clone while another process keeps both cores busy).
#
#   scripts/under-load.sh [--loops N] -- COMMAND [ARGS...]
#
# N busy loops (default: one per core, `nproc`) run at normal priority beside COMMAND and are stopped
# when it ends, whatever its exit; the exit code is COMMAND's. The load average is printed at the start
# and the end, so the run's load is on record.
set -uo pipefail
loops=$(nproc)
if [[ ${1:-} == --loops ]]; then
  loops=${2:?--loops needs a number}
  shift 2
fi
[[ ${1:-} == -- ]] && shift
if [[ $# -eq 0 ]]; then
  echo "under-load: no command given; usage: scripts/under-load.sh [--loops N] -- COMMAND [ARGS...]" >&2
  exit 2
fi
pids=()
stop() { ((${#pids[@]})) && kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null; pids=(); }
trap stop EXIT INT TERM
for _ in $(seq "$loops"); do
  # a pure CPU spinner, no I/O: it competes for the cores and nothing else
  python3 -c 'while True: pass' &
  pids+=("$!")
done
echo "under-load: $loops busy loops (pids ${pids[*]}); load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$@"
rc=$?
echo "under-load: command exited $rc; load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
exit $rc

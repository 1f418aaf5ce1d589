#!/usr/bin/env bash
# A team deployment on one machine, exactly as docs/scaling.md describes it: a throwaway PostgreSQL
# cluster in a folder, Redis, the PostgreSQL-backed Dagster instance, N Celery workers, the daemon and
# the webserver, each its own process group on free loopback ports. The scale tests start their
# cluster only through this script (tests/scale/conftest.py), so the docs cannot drift from what runs.
#
#   scripts/local-cluster.sh up     [--dir DIR] [--workers N] [--settings FILE] [--timeout S]
#   scripts/local-cluster.sh status [--dir DIR]      # one line per process; exit 3 when one is down
#   scripts/local-cluster.sh env    [--dir DIR]      # the exports (also in DIR/cluster.env)
#   scripts/local-cluster.sh down   [--dir DIR] [--purge]
#
# DIR defaults to $SHOPSIMRL_CLUSTER_DIR, else .local-cluster/ in the repository. FILE (the pipeline
# settings every process reads) defaults to $SHOPSIMRL_PIPELINE_CONFIG, else configs/pipeline/pipeline.yaml;
# set `execution.executor: celery` in it for the evaluations to run on the workers. `up` is idempotent:
# run again, it starts only what is not running (a worker killed by a test comes back). It prints the
# environment to export (`source DIR/cluster.env`) for dagster CLI commands against the same instance.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV_BIN="${SHOPSIMRL_VENV:-$REPO/.venv}/bin"
PY="$VENV_BIN/python"
# Dagster's gRPC timeouts for a loaded machine (configs/pipeline/dagster.env), for the daemon and the
# webserver this script starts; a value already set wins.
while IFS='=' read -r key value; do
  if [[ "$key" =~ ^DAGSTER_[A-Z_]+$ && -z "${!key:-}" ]]; then export "$key=$value"; fi
done < "$REPO/configs/pipeline/dagster.env"

usage() { sed -n '7,11p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

cmd="${1:-}"; [[ -n "$cmd" ]] || usage; shift
DIR="${SHOPSIMRL_CLUSTER_DIR:-$REPO/.local-cluster}"
WORKERS=2
SETTINGS="${SHOPSIMRL_PIPELINE_CONFIG:-$REPO/configs/pipeline/pipeline.yaml}"
TIMEOUT=240
PURGE=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dir) DIR="$2"; shift 2 ;;
    --workers) WORKERS="$2"; shift 2 ;;
    --settings) SETTINGS="$2"; shift 2 ;;
    --timeout) TIMEOUT="$2"; shift 2 ;;
    --purge) PURGE=1; shift ;;
    *) echo "local-cluster: unknown argument $1" >&2; usage ;;
  esac
done
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
PIDS="$DIR/pids"; LOGS="$DIR/logs"; PG="$DIR/pg"

log() { echo "local-cluster: $*" >&2; }
die() { log "$*"; exit 1; }

free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

alive() {  # alive NAME: the process recorded in pids/NAME.pid exists and is no zombie
  local pidfile="$PIDS/$1.pid" pid state
  [[ -f "$pidfile" ]] || return 1
  pid="$(cat "$pidfile")"
  state="$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)"
  [[ -n "$state" && "$state" != Z && "$state" != X ]]
}

start() {  # start NAME COMMAND...: a new session (its own process group), output in logs/NAME.log
  local name="$1"; shift
  if alive "$name"; then return 0; fi
  (cd "$REPO" && exec setsid "$@" </dev/null >>"$LOGS/$name.log" 2>&1) &
  echo $! >"$PIDS/$name.pid"
  log "started $name (pid $!)"
}

stop_group() {  # stop_group NAME: SIGTERM to the process group, SIGKILL after 20 s
  local pidfile="$PIDS/$1.pid" pid
  [[ -f "$pidfile" ]] || return 0
  pid="$(cat "$pidfile")"
  if alive "$1"; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 200); do alive "$1" || break; sleep 0.1; done
    if alive "$1"; then kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true; fi
  fi
  rm -f "$pidfile"
}

# --- PostgreSQL: a cluster in DIR/pg owned by the postgres user when running as root --------------
pg_bin() {
  local bins
  bins="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"
  [[ -n "$bins" ]] || die "PostgreSQL is not installed (scripts/setup.sh --ui installs Debian postgresql)"
  echo "$bins"
}
as_owner() { if [[ $EUID -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi; }

pg_up() {
  local bin port
  bin="$(pg_bin)"
  mkdir -p "$PG"
  if [[ $EUID -eq 0 ]]; then
    id postgres >/dev/null 2>&1 || die "running as root needs a postgres system user (PostgreSQL refuses root)"
    chmod 711 "$DIR"
    runuser -u postgres -- test -x "$DIR" || die "the postgres user cannot reach $DIR; use a --dir outside private folders"
  fi
  if [[ ! -f "$PG/data/PG_VERSION" ]]; then
    umask 077
    "$PY" -c 'import secrets; print(secrets.token_hex(16))' >"$PG/password"
    umask 022
    [[ $EUID -eq 0 ]] && chown -R postgres: "$PG"
    as_owner "$bin/initdb" -D "$PG/data" -U dagster --pwfile "$PG/password" --auth-local=trust \
      --auth-host=scram-sha-256 -E UTF8 --no-sync >"$LOGS/initdb.log" 2>&1 || die "initdb failed: $LOGS/initdb.log"
  fi
  if as_owner "$bin/pg_ctl" -D "$PG/data" status >/dev/null 2>&1; then return 0; fi
  port="$(free_port)"
  echo "$port" >"$DIR/pg.port"
  as_owner "$bin/pg_ctl" -D "$PG/data" -l "$PG/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $PG -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
    start >/dev/null || die "PostgreSQL did not start: $PG/server.log"
  as_owner "$bin/psql" -h "$PG" -p "$port" -U dagster -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname='dagster'" \
    | grep -q 1 || as_owner "$bin/createdb" -h "$PG" -p "$port" -U dagster dagster
  log "PostgreSQL on 127.0.0.1:$port (data $PG/data)"
}

pg_down() {
  [[ -d "$PG/data" ]] || return 0
  as_owner "$(pg_bin)/pg_ctl" -D "$PG/data" -m fast -w -t 30 stop >/dev/null 2>&1 || true
}

# --- Redis: no snapshots, no AOF ------------------------------------------------------------------
redis_up() {
  command -v redis-server >/dev/null || die "redis-server is not installed (scripts/setup.sh --ui installs it)"
  if alive redis; then return 0; fi
  local port; port="$(free_port)"
  echo "$port" >"$DIR/redis.port"
  mkdir -p "$DIR/redis"
  start redis redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$DIR/redis"
  for _ in $(seq 1 100); do
    "$PY" -c "import socket,sys; socket.create_connection(('127.0.0.1', $port), 1)" 2>/dev/null && return 0
    sleep 0.1
  done
  die "redis-server did not listen on $port: $LOGS/redis.log"
}

write_env() {  # DIR/cluster.env: everything every process of the deployment reads
  local pg_port redis_port web_port
  pg_port="$(cat "$DIR/pg.port")"; redis_port="$(cat "$DIR/redis.port")"; web_port="$(cat "$DIR/webserver.port")"
  cat >"$DIR/cluster.env" <<EOF
# written by scripts/local-cluster.sh; source it for dagster commands against this cluster
export DAGSTER_HOME='$DIR/dagster_home'
export SHOPSIMRL_PIPELINE_CONFIG='$SETTINGS'
export DAGSTER_PG_HOST=127.0.0.1 DAGSTER_PG_PORT=$pg_port DAGSTER_PG_USER=dagster DAGSTER_PG_DB=dagster
export DAGSTER_PG_PASSWORD="\$(cat '$PG/password')"
export SHOPSIMRL_CELERY_BROKER=redis://127.0.0.1:$redis_port/0 SHOPSIMRL_CELERY_BACKEND=redis://127.0.0.1:$redis_port/1
export SHOPSIMRL_WEBSERVER_URL=http://127.0.0.1:$web_port
EOF
}

wait_loaded() {  # the webserver answers and reports the code location LOADED
  local url="$1"
  "$PY" - "$url" "$TIMEOUT" <<'EOF' || die "the webserver did not load the code location within ${TIMEOUT} s: $LOGS/webserver.log"
import json, sys, time, urllib.request
url, timeout = sys.argv[1], float(sys.argv[2])
query = json.dumps({"query": "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus } } } }"}).encode()
deadline = time.monotonic() + timeout
while time.monotonic() < deadline:
    try:
        request = urllib.request.Request(f"{url}/graphql", data=query, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            entries = json.load(response)["data"]["workspaceOrError"]["locationEntries"]
        if entries and all(e["loadStatus"] == "LOADED" for e in entries):
            sys.exit(0)
    except Exception:
        pass
    time.sleep(1)
sys.exit(1)
EOF
}

up() {
  mkdir -p "$PIDS" "$LOGS"
  [[ -f "$SETTINGS" ]] || die "pipeline settings $SETTINGS not found (--settings FILE)"
  SETTINGS="$(cd "$(dirname "$SETTINGS")" && pwd)/$(basename "$SETTINGS")"
  if [[ -f "$DIR/settings.path" && "$(cat "$DIR/settings.path")" != "$SETTINGS" ]] && alive daemon; then
    die "the cluster in $DIR runs with $(cat "$DIR/settings.path"); run down first to change settings"
  fi
  echo "$SETTINGS" >"$DIR/settings.path"
  pg_up
  redis_up
  [[ -f "$DIR/webserver.port" ]] && alive webserver || free_port >"$DIR/webserver.port"
  write_env
  # shellcheck disable=SC1091
  source "$DIR/cluster.env"
  export PATH="$VENV_BIN:$PATH"
  "$PY" -m shopsimrl_dagster.deploy.instance "$DAGSTER_HOME" >/dev/null
  for i in $(seq 1 "$WORKERS"); do
    start "celery-w$i" "$VENV_BIN/celery" -A shopsimrl_dagster.deploy.celery_worker worker --pool solo \
      --prefetch-multiplier 1 -n "w$i@%h" --without-gossip --without-mingle --loglevel INFO
  done
  start daemon "$VENV_BIN/dagster-daemon" run -w workspace.yaml
  start webserver "$VENV_BIN/dagster-webserver" -w workspace.yaml -h 127.0.0.1 -p "$(cat "$DIR/webserver.port")"
  wait_loaded "$SHOPSIMRL_WEBSERVER_URL"
  log "up: webserver $SHOPSIMRL_WEBSERVER_URL, $WORKERS Celery worker(s); export the environment with:"
  echo "source $DIR/cluster.env"
  sed -n '2,$p' "$DIR/cluster.env"
}

status() {
  local bad=0 name
  for pidfile in "$PIDS"/*.pid; do
    [[ -e "$pidfile" ]] || continue
    name="$(basename "$pidfile" .pid)"
    if alive "$name"; then echo "$name running (pid $(cat "$pidfile"))"; else echo "$name stopped"; bad=1; fi
  done
  if [[ -d "$PG/data" ]] && as_owner "$(pg_bin)/pg_ctl" -D "$PG/data" status >/dev/null 2>&1; then
    echo "postgresql running (port $(cat "$DIR/pg.port"))"
  else
    echo "postgresql stopped"; bad=1
  fi
  return $((bad * 3))
}

down() {
  local pidfile
  for name in webserver daemon; do stop_group "$name"; done
  for pidfile in "$PIDS"/celery-*.pid; do [[ -e "$pidfile" ]] && stop_group "$(basename "$pidfile" .pid)"; done
  stop_group redis
  pg_down
  log "down: $DIR"
  if [[ $PURGE == 1 ]]; then rm -rf "$DIR"; fi
}

case "$cmd" in
  up) up ;;
  status) status ;;
  env) cat "$DIR/cluster.env" ;;
  down) down ;;
  *) usage ;;
esac

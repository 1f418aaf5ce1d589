# The two commands of the README. Both install what they need into ./.venv first.
.PHONY: demo test test-fast ui bench setup

setup:
	@scripts/setup.sh

## Runs the whole lineage for a demo checkpoint against the built-in sandbox, headless.
demo: setup
	@.venv/bin/python -m shopsimrl_dagster.demo

## Runs the whole test suite (unit, integration over loopback HTTP, Dagster, headless-browser UI).
test:
	@scripts/setup.sh --ui
	@scripts/run-tests.sh

## Unit and integration tests without the browser/webserver tests.
test-fast: setup
	@.venv/bin/python -m pytest -q -m "not ui"

## Opens the Dagster UI on http://127.0.0.1:3000 with this project's instance.
ui: setup
	@scripts/dagster-dev.sh

bench: setup
	@.venv/bin/python -m benchmarks.run_all

"""Helpers shared by the test folders (no tests in here), importable as ``testkit.<module>``.

pytest puts ``tests/`` on ``sys.path`` (``pythonpath`` in pyproject.toml), so a test imports
``from testkit.tracegen import make_trace`` wherever it lives:

- ``core_runkit``  — synthetic v4 records, config and split files for the run/plan/summary tests;
- ``tracegen``     — trace records shaped like runtime-semantics §12.4 for the skills tests;
- ``gatekit``      — a split, a val config, a bare run, drafts, pools and a masked runner for the gates;
- ``analyst_stub`` — the OpenAI-compatible analyst stub served by uvicorn in the analyst tests.
"""

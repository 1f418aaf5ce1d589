"""Benchmarks of shopsimrl: speed is measured here, never asserted in tests.

Run all of them with ``make bench`` (``python -m benchmarks.run_all``); each module also runs on its
own (``python -m benchmarks.core_throughput``, ``python -m benchmarks.sandbox_bench``). Results go
to ``benchmarks/results/``; see docs/benchmarks.md.
"""

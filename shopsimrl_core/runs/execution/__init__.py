"""Layer 5 — execution: the evaluator that drives many episodes at once.

It takes a config from the configuration layer, a plan from planning, a run folder from storage,
leases and endpoint checks from the layers beside it, and reports progress. Nothing below imports it.
"""

"""Layer 3 — storage: the run folder and everything written into it.

Trace lines and their index, the run index across runs, durable writes, resumable state and the
test-split access ledger. Built on planning (a run folder holds one plan) and configuration.
"""

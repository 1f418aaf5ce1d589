"""Layer 4 — endpoints: checking that the model and environment endpoints answer before a run starts.

Preflight, the health checks the Dagster layer and the CLI share, and the seed probe.
"""

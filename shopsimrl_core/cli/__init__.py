"""The ``shopsimrl`` command line: one verb per task a researcher runs without Dagster."""

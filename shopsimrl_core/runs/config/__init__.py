"""Layer 1 — configuration: the evaluation config file and its sections, `.env` files and safe YAML.

Nothing here knows about runs on disk or HTTP; every other layer reads what this one parsed.
"""

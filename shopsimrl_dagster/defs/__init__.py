"""The definitions of the location, one module per kind: builders that take the pipeline settings.

``shopsimrl_dagster.definitions`` calls them (``build_definitions``); ``[tool.dg]`` names this
package as the defs module for `dg` scaffolding.
"""

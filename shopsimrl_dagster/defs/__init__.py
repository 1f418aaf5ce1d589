"""Every module in this folder contributes definitions; ``shopsimrl_dagster.definitions`` loads them all."""

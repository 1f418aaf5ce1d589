"""Trainer adapters at the top edge of ``shopsimrl_core.training``: thin, optional, imported only by their users.

``slime`` (custom generate function), ``trl`` (GRPOTrainer rollouts) and ``verifiers`` (a verifiers environment)
each need their trainer's extra (``pip install 'shopsimrl[slime|trl|verifiers]'``); nothing else in the core
imports them (docs/training.md).
"""

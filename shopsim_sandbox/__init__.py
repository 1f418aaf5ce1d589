"""Our ShopSimulator sandbox: the environment server (``app``) and a baseline policy.

The policy (``policy``) is served as an OpenAI-compatible endpoint; ``shopsim-sandbox serve``
(``cli``) starts both.
"""

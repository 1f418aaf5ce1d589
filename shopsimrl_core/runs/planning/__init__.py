"""Layer 2 — planning: frozen splits, the episode jobs they expand to, and the job plan with its identity.

Built on the configuration layer only; nothing here touches a run folder or a network.
"""

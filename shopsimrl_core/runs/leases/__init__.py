"""Layer 4 — environment leases: slots on ShopSimulator servers.

The lease journal, the client-side slot budget, the journaled environment and the pool of
environment servers, and outage handling. Built on storage (the journal lives in the run folder).
"""

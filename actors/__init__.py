"""Agent-level actors (Chain, Agent, Swarm, Supervisor) built on `tether.runtime`.

They arrive with the issues that build them; this release ships the store layer.
"""

__all__ = ()

"""LeaderWorkerSets (``leaderworkerset.x-k8s.io/v1``): the Deployments' zone and host spread on the leaders,
counting groups, and each group kept within one domain of the gang placement's level (rules E1-E8).

``shape`` checks what the family reads (rule E1); ``leaders`` shows the leaders to the spread and generates the
leader template when there is none (rules E2, E3); ``packing`` keeps each group within one domain (rules E5,
E6); ``gangs`` says what gives each group its gang (rules E7, E8); ``mutate`` is the admission policy.
"""
from __future__ import annotations

from .model import is_leaderworkerset
from .mutate import mutate_leaderworkerset
from .shape import leaderworkerset_errors

__all__ = ["is_leaderworkerset", "leaderworkerset_errors", "mutate_leaderworkerset"]

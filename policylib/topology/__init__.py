"""The one topology declaration and its writers (rules N1-N9).

- :mod:`~policylib.topology.levels`: the levels and the placement, resolved once from the configuration;
- :mod:`~policylib.topology.volcano`: Volcano's words (a PodGroup's ``networkTopology``);
- :mod:`~policylib.topology.kueue`: Kueue's words (podset topology annotations) and the port of Kueue's checks;
- kube-scheduler's words are :mod:`policylib.gang.topology` (rule G25), JobSet's :mod:`policylib.jobset.mutation`
  (rule J5).
"""
from __future__ import annotations

from .levels import NONE, PREFERRED, REQUIRED, Level, Placement, placement

__all__ = ["NONE", "PREFERRED", "REQUIRED", "Level", "Placement", "placement"]

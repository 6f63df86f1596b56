"""Dispatch by kind: every policy behind one ``mutate`` call, through the workload families' table."""
from __future__ import annotations

from typing import Any

from .config import Config, load_config
from .facts import ClusterFacts
from .families import family_of, unhandled_reason
from .result import Result


def mutate(obj: dict[str, Any], config: Config | dict[str, Any] | None = None, *, old: dict[str, Any] | None = None,
           facts: ClusterFacts | None = None, namespace: str | None = None) -> Result:
    """Rule P2: apply the policy of ``obj``'s workload family (:data:`policylib.families.FAMILIES`); other
    kinds come back unchanged with ``unhandled`` saying so (rule P9), and a family whose policies are off
    unchanged with a reason.

    ``old`` is the object before an UPDATE (None on CREATE); ``facts`` the
    cluster objects a policy may read (HPAs, Nodes); ``namespace`` overrides
    ``metadata.namespace`` (an AdmissionReview's request namespace).
    Raises :class:`~policylib.errors.PolicyError` for an object it cannot handle.
    """
    config = load_config(config)
    family = family_of(obj)
    if family is None:
        reason = unhandled_reason(obj)
        return Result(obj, reasons=[reason], unhandled=reason)
    if not family.is_enabled(config):
        return family.off(obj)
    return family.mutate(obj, config, old=old, facts=facts, namespace=namespace)

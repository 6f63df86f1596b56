"""Dispatch by kind: every policy behind one ``mutate`` call."""
from __future__ import annotations

from typing import Any

from .config import Config, load_config
from .facts import ClusterFacts
from .gang import is_kubeflow_job, is_pod, mutate_kubeflow_job, mutate_pod
from .result import Result
from .spread import is_deployment, mutate_deployment
from .volcano import is_volcano_job, is_volcano_workload, mutate_other_volcano_kind, mutate_volcano_job


def mutate(obj: dict[str, Any], config: Config | dict[str, Any] | None = None, *, old: dict[str, Any] | None = None,
           facts: ClusterFacts | None = None, namespace: str | None = None) -> Result:
    """Rule P2: apply the policy for ``obj``'s kind; other kinds come back unchanged.

    ``old`` is the object before an UPDATE (None on CREATE); ``facts`` the
    cluster objects a policy may read (HPAs, Nodes); ``namespace`` overrides
    ``metadata.namespace`` (an AdmissionReview's request namespace).
    Raises :class:`~policylib.errors.PolicyError` for an object it cannot handle.
    """
    config = load_config(config)
    if is_deployment(obj):
        return mutate_deployment(obj, config, old=old, facts=facts, namespace=namespace)
    if is_kubeflow_job(obj):
        if not config.gang.enabled:
            return Result(obj, reasons=["gang policies are off (gang.enabled: false): left unchanged"])
        return mutate_kubeflow_job(obj, config, old=old, namespace=namespace)
    if is_volcano_job(obj) or is_volcano_workload(obj):
        if not config.volcano.enabled:
            return Result(obj, reasons=["Volcano policies are off (volcano.enabled: false): left unchanged"])
        if is_volcano_job(obj):
            return mutate_volcano_job(obj, config, old=old, facts=facts, namespace=namespace)
        return mutate_other_volcano_kind(obj)
    if is_pod(obj):   # rule G17: only pods labelled for gang method workload change
        return mutate_pod(obj, config, old=old, namespace=namespace)
    return Result(obj)

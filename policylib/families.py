"""The workload families: one dispatch table for admission and for planning (rule P2).

Each :class:`Family` says which objects are its own (``matches``), the setting that turns its policies
off (``enabled``, a ``section.key`` of the configuration, or None when only its own settings decide),
the policy that mutates one of its objects on admission (``mutate``) and the planners that keep an
existing one right (``planners``). :func:`policylib.mutate` applies the first family that matches an
object; :func:`policylib.plan.plan` runs a family's planners on that family's objects only, and
:data:`PLANNERS` (what ``policylib plan`` and the controller run) is every family's planners in table
order. Adding a workload family is adding an entry to :data:`FAMILIES` (docs/architecture.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from .config import Config
from .facts import ClusterFacts
from .gang import is_kubeflow_job, is_pod, mutate_kubeflow_job, mutate_pod
from .planners import Planner, plan_deployment, plan_podgroups, plan_workload
from .result import Result
from .spread import is_deployment, mutate_deployment
from .volcano import is_volcano_job, is_volcano_workload, mutate_other_volcano_kind, mutate_volcano_job


class Predicate(Protocol):
    def __call__(self, obj: object, /) -> bool: ...


class Mutator(Protocol):
    """A family's admission policy: the object, the config, the object before an UPDATE (None on CREATE),
    the cluster facts and the request's namespace."""

    def __call__(self, obj: dict[str, Any], config: Config, *, old: dict[str, Any] | None,
                 facts: ClusterFacts | None, namespace: str | None) -> Result: ...


@dataclass(frozen=True)
class Family:
    """One workload family: its objects, its on/off setting, its admission policy and its planners."""

    name: str
    matches: Predicate
    mutate: Mutator
    #: ``section.key`` of a boolean setting that turns the family's policies off, or None.
    enabled: str | None = None
    planners: tuple[Planner, ...] = ()

    def is_enabled(self, config: Config) -> bool:
        if self.enabled is None:
            return True
        section, key = self.enabled.split(".")
        return bool(getattr(getattr(config, section), key))

    def off(self, obj: dict[str, Any]) -> Result:
        """The object left unchanged because the family is off, saying which setting did it."""
        return Result(obj, reasons=[f"{self.name} policies are off ({self.enabled}: false): left unchanged"])


def _deployment(obj: dict[str, Any], config: Config, *, old: dict[str, Any] | None, facts: ClusterFacts | None,
                namespace: str | None) -> Result:
    return mutate_deployment(obj, config, old=old, facts=facts, namespace=namespace)


def _kubeflow_job(obj: dict[str, Any], config: Config, *, old: dict[str, Any] | None, facts: ClusterFacts | None,
                  namespace: str | None) -> Result:
    return mutate_kubeflow_job(obj, config, old=old, namespace=namespace, facts=facts)


def _is_volcano(obj: object) -> bool:
    return is_volcano_job(obj) or is_volcano_workload(obj)


def _volcano(obj: dict[str, Any], config: Config, *, old: dict[str, Any] | None, facts: ClusterFacts | None,
             namespace: str | None) -> Result:
    if is_volcano_job(obj):
        return mutate_volcano_job(obj, config, old=old, facts=facts, namespace=namespace)
    return mutate_other_volcano_kind(obj)


def _pod(obj: dict[str, Any], config: Config, *, old: dict[str, Any] | None, facts: ClusterFacts | None,
         namespace: str | None) -> Result:
    return mutate_pod(obj, config, old=old, namespace=namespace, facts=facts)


#: Every workload family, in the order an object is matched: Deployments (the spread, rules S1-S22),
#: Kubeflow jobs (gangs, rules G1-G21), Volcano Jobs and the other Volcano kinds (rules V1-V20), and
#: pods (only those labelled for gang method workload change, rule G17).
FAMILIES: tuple[Family, ...] = (
    Family("Deployment", is_deployment, _deployment, planners=(plan_deployment,)),
    Family("gang", is_kubeflow_job, _kubeflow_job, enabled="gang.enabled", planners=(plan_podgroups, plan_workload)),
    Family("Volcano", _is_volcano, _volcano, enabled="volcano.enabled"),
    Family("Pod", is_pod, _pod),
)

#: Every planner, in table order: what ``policylib plan`` prints and the controller writes.
PLANNERS: tuple[Planner, ...] = tuple(p for family in FAMILIES for p in family.planners)


def family_of(obj: object) -> Family | None:
    """The first family whose objects include ``obj``; None for a kind no policy reads."""
    return next((f for f in FAMILIES if f.matches(obj)), None)


def planner_family(planner: Planner) -> Family | None:
    """The family a planner belongs to; None for a planner of no family (a caller's own runs on every object)."""
    return next((f for f in FAMILIES if planner in f.planners), None)

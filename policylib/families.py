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
from typing import Any, Callable, Protocol

from .config import Config
from .constants import (
    APPS_API_VERSION,
    APPS_GROUP,
    JOBSET_API_VERSION,
    KUBEFLOW_API_VERSION,
    KUBEFLOW_GROUP,
    LWS_API_VERSION,
    MPI_V2_API_VERSION,
    TRAINER_API_VERSION,
    VOLCANO_JOB_API_VERSION,
)
from .facts import ClusterFacts
from .gang import is_kubeflow_job, is_pod, mutate_kubeflow_job, mutate_pod
from .gang.keys import REPLICA_SPECS
from .jobset import is_jobset, mutate_jobset, trainjob_owner
from .lws import is_leaderworkerset, mutate_leaderworkerset
from .planners import Planner, plan_deployment, plan_podgroups, plan_statefulset, plan_workload
from .result import Result, is_opted_out
from .spread import is_deployment, mutate_deployment
from .statefulset import is_statefulset, mutate_statefulset
from .topology import placement
from .topology.kueue import Template, kueue_words
from .trainer import is_trainjob, mutate_trainjob
from .volcano import is_volcano_job, is_volcano_workload
from .volcano.mutation import mutate_other_volcano_kind, mutate_volcano_job


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
    #: The ``apiVersion kind`` of each object it handles (:data:`HANDLED_KINDS`, docs/library.md).
    kinds: tuple[str, ...] = ()
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


def _kubeflow_templates(obj: dict[str, Any]) -> list[Template]:
    specs_key = REPLICA_SPECS.get(str(obj.get("kind")))
    spec = obj.get("spec")
    specs = spec.get(specs_key) if specs_key and isinstance(spec, dict) else None
    return [(("spec", specs_key, key, "template"), str(key)) for key, rs in (specs or {}).items()
            if isinstance(rs, dict) and isinstance(rs.get("template"), dict)] if isinstance(specs, dict) else []


def _jobset_templates(obj: dict[str, Any]) -> list[Template]:
    if trainjob_owner(obj) is not None:   # rule J6: the TrainJob's words
        return []
    spec = obj.get("spec")
    rjobs = spec.get("replicatedJobs") if isinstance(spec, dict) else None
    return [(("spec", "replicatedJobs", i, "template", "spec", "template"), str(r.get("name")))
            for i, r in enumerate(rjobs if isinstance(rjobs, list) else []) if _pod_template(r)]


def _pod_template(rjob: Any) -> bool:
    template = rjob.get("template") if isinstance(rjob, dict) else None
    spec = template.get("spec") if isinstance(template, dict) else None
    return isinstance(spec, dict) and isinstance(spec.get("template"), dict)


def with_kueue_words(mutate: Mutator, templates: Callable[[dict[str, Any]], list[Template]]) -> Mutator:
    """Rule N6: a family's policy followed by Kueue's words for the gang placement on the object's pod templates
    (:func:`policylib.topology.kueue.kueue_words`)."""
    def run(obj: dict[str, Any], config: Config, *, old: dict[str, Any] | None, facts: ClusterFacts | None,
            namespace: str | None) -> Result:
        result = mutate(obj, config, old=old, facts=facts, namespace=namespace)
        if is_opted_out(obj):
            return result
        return kueue_words(obj, result, placement(config), templates(obj), old)
    return run


def _is_volcano(obj: object) -> bool:
    return is_volcano_job(obj) or is_volcano_workload(obj)


def _volcano(obj: dict[str, Any], config: Config, *, old: dict[str, Any] | None, facts: ClusterFacts | None,
             namespace: str | None) -> Result:
    if is_volcano_job(obj):
        return mutate_volcano_job(obj, config, old=old, facts=facts, namespace=namespace)
    return mutate_other_volcano_kind(obj)


#: Every workload family, in the order an object is matched: Deployments (the spread, rules S1-S22), StatefulSets
#: (the same spread, rules A1-A6), LeaderWorkerSets (the spread on their leaders, each group packed: rules E1-E8),
#: Kubeflow jobs (gangs, rules G1-G21), JobSets (gangs per start wave, rules J1-J6), TrainJobs (rules T1-T4),
#: Volcano Jobs and the other
#: Volcano kinds (rules V1-V20), and pods (only those labelled for gang method workload change, rule G17).
FAMILIES: tuple[Family, ...] = (
    Family("Deployment", is_deployment, mutate_deployment, kinds=(f"{APPS_API_VERSION} Deployment",),
           planners=(plan_deployment,)),
    Family("StatefulSet", is_statefulset, mutate_statefulset, kinds=(f"{APPS_API_VERSION} StatefulSet",),
           enabled="statefulSets.enabled", planners=(plan_statefulset,)),
    Family("LeaderWorkerSet", is_leaderworkerset, mutate_leaderworkerset, kinds=(f"{LWS_API_VERSION} LeaderWorkerSet",),
           enabled="leaderWorkerSets.enabled"),
    Family("gang", is_kubeflow_job, with_kueue_words(mutate_kubeflow_job, _kubeflow_templates),
           kinds=(f"{KUBEFLOW_API_VERSION} TFJob", f"{KUBEFLOW_API_VERSION} PyTorchJob",
                  f"{KUBEFLOW_API_VERSION} MPIJob", f"{MPI_V2_API_VERSION} MPIJob"),
           enabled="gang.enabled", planners=(plan_podgroups, plan_workload)),
    Family("JobSet", is_jobset, with_kueue_words(mutate_jobset, _jobset_templates),
           kinds=(f"{JOBSET_API_VERSION} JobSet",), enabled="gang.enabled",
           planners=(plan_podgroups, plan_workload)),
    Family("TrainJob", is_trainjob, mutate_trainjob, kinds=(f"{TRAINER_API_VERSION} TrainJob",), enabled="gang.enabled",
           planners=(plan_podgroups, plan_workload)),
    Family("Volcano", _is_volcano, _volcano, kinds=(f"{VOLCANO_JOB_API_VERSION} Job",), enabled="volcano.enabled"),
    Family("Pod", is_pod, mutate_pod, kinds=("v1 Pod",)),
)

#: Every kind a family handles, in table order (rule P9; docs/library.md lists them).
HANDLED_KINDS: tuple[str, ...] = tuple(kind for family in FAMILIES for kind in family.kinds)

#: The handled kinds in one phrase, for the unhandled-kind reason.
HANDLED_SUMMARY = ("it handles Deployments, StatefulSets, LeaderWorkerSets, Kubeflow TFJobs, PyTorchJobs and MPIJobs, "
                   "JobSets, TrainJobs, Volcano Jobs and gang Pods")

#: Kinds that run pods and that no family handles: ``preview`` notes each one it reads and ``check --cluster``
#: counts those in scope (rule P9), so "not handled" never looks like "nothing to do". Matched by API group
#: and kind, whatever the version.
UNHANDLED_WORKLOADS: frozenset[tuple[str, str]] = frozenset({
    (APPS_GROUP, "DaemonSet"), (APPS_GROUP, "ReplicaSet"), ("batch", "Job"), ("batch", "CronJob"),
    (KUBEFLOW_GROUP, "PaddleJob"), (KUBEFLOW_GROUP, "XGBoostJob"),
    (KUBEFLOW_GROUP, "JAXJob"), ("ray.io", "RayJob"), ("ray.io", "RayCluster"), ("ray.io", "RayService"),
})

#: Kinds a family handles that no webhook entry sends (rule P10): in a cluster they are left as they are, and
#: ``check --cluster`` counts those in scope, so that does not look like "nothing to do". Matched by API group and
#: kind. None today: every family's kinds have a webhook entry (TrainJobs: ``trainjobs.policylib.io``, rule T6).
NOT_ADMITTED: frozenset[tuple[str, str]] = frozenset()

#: Every planner, once, in table order: what ``policylib plan`` prints and the controller writes (a planner two
#: families list, such as the PodGroups' of Kubeflow jobs and JobSets, runs on the objects of both).
PLANNERS: tuple[Planner, ...] = tuple(dict.fromkeys(p for family in FAMILIES for p in family.planners))


def family_of(obj: object) -> Family | None:
    """The first family whose objects include ``obj``; None for a kind no policy reads."""
    return next((f for f in FAMILIES if f.matches(obj)), None)


def planner_families(planner: Planner) -> tuple[Family, ...]:
    """The families that list a planner; none for a planner of no family (a caller's own runs on every object)."""
    return tuple(f for f in FAMILIES if planner in f.planners)


def is_unhandled_workload(obj: object) -> bool:
    """A kind that runs pods and that no family handles (:data:`UNHANDLED_WORKLOADS`)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("apiVersion"), str):
        return False
    api_version: str = obj["apiVersion"]
    group = api_version.rpartition("/")[0]
    return family_of(obj) is None and (group, obj.get("kind")) in UNHANDLED_WORKLOADS


def is_not_admitted(obj: object) -> bool:
    """Rule P10: an object of a kind a family handles that no webhook entry sends (:data:`NOT_ADMITTED`)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("apiVersion"), str):
        return False
    return (obj["apiVersion"].rpartition("/")[0], obj.get("kind")) in NOT_ADMITTED


def unhandled_reason(obj: dict[str, Any]) -> str:
    """Rule P9: why an object of a kind no family handles comes back unchanged, naming the kinds that are."""
    kind = f"{obj.get('apiVersion')} {obj.get('kind')}"
    return f"not handled: policylib has no policy for {kind} ({HANDLED_SUMMARY})"

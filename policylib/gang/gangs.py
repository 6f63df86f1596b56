"""The gangs of a job: names, minimums and GangGroups."""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cached_property

from ..config import GangSettings
from ..labels import dns1123_subdomain_errors, label_value_errors
from .job import KubeflowJob

MAX_GANG_NAME = 63
HASH_LEN = 8




@dataclass(frozen=True)
class Gang:
    """One gang: its name, minimum, pod count and the replica types whose pods it holds."""

    name: str
    min_available: int
    total: int
    replica_types: tuple[str, ...]


@dataclass(frozen=True)
class GangPlan:
    """The gangs of one job; ``groups`` lists ``<namespace>/<gang>`` when they form a GangGroup."""

    namespace: str
    gangs: tuple[Gang, ...]
    groups: tuple[str, ...] = ()

    def gang_of(self, replica_type: str) -> Gang | None:
        """The first gang holding ``replica_type`` (looked up in an index of the plan, built once)."""
        return self._by_type.get(replica_type)

    @cached_property
    def _by_type(self) -> dict[str, Gang]:
        index: dict[str, Gang] = {}
        for g in self.gangs:
            for t in g.replica_types:
                index.setdefault(t, g)
        return index


def gang_name(base: str) -> str:
    """Rule G3: a name that is both a DNS subdomain and a label value.

    ``base`` is kept when it is both; otherwise it is lowercased, reduced to
    ``[a-z0-9-]`` and cut so that ``-`` and an 8-character SHA-256 prefix of
    ``base`` fit in 63 characters. The hash keeps two long names apart and
    gives the same name on every run.
    """
    if not dns1123_subdomain_errors(base) and not label_value_errors(base) and len(base) <= MAX_GANG_NAME:
        return base
    digest = hashlib.sha256(base.encode()).hexdigest()[:HASH_LEN]
    head = re.sub(r"[^a-z0-9-]+", "-", base.lower()).strip("-")[:MAX_GANG_NAME - HASH_LEN - 1].rstrip("-")
    return f"{head}-{digest}" if head else digest


def role_gang_name(job_name: str, replica_type: str) -> str:
    """``<job>-<type>``, the type lowercased, kept within 63 characters (rules G1, G3)."""
    return gang_name(f"{job_name}-{replica_type.lower()}")


def job_minimum(job: KubeflowJob) -> int:
    """Rule G2: ``runPolicy.schedulingPolicy.minAvailable`` when set, else the sum of replicas over
    every replica type, Evaluator included (training-operator ReconcileJobs, minMember)."""
    return job.min_available if job.min_available is not None else job.total


def plan_gangs(job: KubeflowJob, settings: GangSettings) -> GangPlan | None:
    """Rule G1: one gang named after the job, or with ``groupByRole`` one gang per replica type
    linked as a GangGroup. None when the job has no pods.

    A role with 0 replicas gets no gang: a GangGroup member with no pods would
    hold the other gangs forever.
    """
    if job.total == 0:
        return None
    if not settings.groupByRole:
        return GangPlan(job.namespace, (Gang(gang_name(job.name), job_minimum(job), job.total,
                                             tuple(t.key for t in job.types)),))
    gangs = tuple(Gang(role_gang_name(job.name, t.key), t.replicas, t.replicas, (t.key,))
                  for t in job.types if t.replicas > 0)
    return GangPlan(job.namespace, gangs, tuple(sorted(f"{job.namespace}/{g.name}" for g in gangs)))


def podgroup_timeout(job: KubeflowJob, settings: GangSettings) -> int:
    """``runPolicy.schedulingPolicy.scheduleTimeoutSeconds`` when set, else ``gang.scheduleTimeoutSeconds``."""
    return job.schedule_timeout if job.schedule_timeout is not None else settings.scheduleTimeoutSeconds

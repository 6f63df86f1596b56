"""JobSets (``jobset.x-k8s.io/v1alpha2``): the gang of each start wave on the ReplicatedJobs' pod templates, in
every gang method policylib has, and JobSet's exclusive placement where it cannot deadlock (rules J1-J7)."""
from __future__ import annotations

from .keys import EXCLUSIVE_TOPOLOGY, is_jobset, trainjob_owner
from .mutation import mutate_jobset
from .read import JobSet, ReplicatedJob, plan_jobset_gangs, read_jobset

__all__ = ["EXCLUSIVE_TOPOLOGY", "JobSet", "ReplicatedJob", "is_jobset", "mutate_jobset", "plan_jobset_gangs",
           "read_jobset", "trainjob_owner"]

"""Kubeflow Trainer v2 TrainJobs (``trainer.kubeflow.org/v1alpha1``): the gang of each start wave of the JobSet
Trainer makes, written in policylib's own ``spec.runtimePatches`` entry (rules T1-T4)."""
from __future__ import annotations

from .keys import MANAGER, is_trainjob
from .mutation import mutate_trainjob
from .runtime import TrainJob, read_trainjob, runtime_jobset

__all__ = ["MANAGER", "TrainJob", "is_trainjob", "mutate_trainjob", "read_trainjob", "runtime_jobset"]

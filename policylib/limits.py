"""Rule P7: the most entries a policy reads of each list it walks entry by entry.

Kubernetes sets no count on these lists: the API server's 3 MiB request body (``MaxRequestBodyBytes``) is
their only bound, and spent on one list it holds tens of thousands of entries (43,000 topology spread
constraints, 33,000 Volcano tasks, 27,000 Kubeflow replica specs). A policy does some microseconds of
work per entry it reads (validation, the rewrite, the patch), so each list it walks entry by entry has a
limit here, far past what a workload uses and low enough that a review at the limit costs a few tens of
milliseconds (``bench/bench_review_size.py``). Past a limit the object is refused before any entry is
read: a :class:`~policylib.errors.PolicyError` naming the field and the limit (``Too many: 20000: must
have at most 1000 items``), which the webhook answers by its failure mode, never a timeout. Lists no
policy walks entry by entry (containers, env, volumes, tolerations) have no limit: their cost is the
parse, bounded by the request body.
"""
from __future__ import annotations

from typing import Any

from .errors import FieldError, Path, too_many

#: ``topologySpreadConstraints`` of a pod template: one per (topologyKey, whenUnsatisfiable), the key a Node
#: label; pods spread over a handful (kube-scheduler's default constraints are two: host and zone).
MAX_SPREAD_CONSTRAINTS = 1000
#: Each pod anti-affinity term list (required, preferred) the spread reads (rule S9).
MAX_AFFINITY_TERMS = 1000
#: A Volcano Job's ``spec.tasks``: a task is a role of the job (master, worker, ps; Volcano's examples have
#: one to three).
MAX_VOLCANO_TASKS = 500
#: A Volcano lifecycle policy list (the job's, each task's): each event once (eight of them) and each exit
#: code once (an exit status is 0-255 on Linux).
MAX_VOLCANO_POLICIES = 1000
#: A Kubeflow job's replica specs, one per replica type: training-operator serves at most five types
#: (TFJob: Chief, Master, PS, Worker, Evaluator; PyTorchJob and MPIJob two) and refuses others; Kubernetes'
#: own gang API holds at most 8 pod groups per Workload (``WorkloadMaxPodGroups``).
MAX_REPLICA_TYPES = 8


def limit_errors(items: Any, path: Path, limit: int) -> list[FieldError]:
    """Rule P7: a list (or map) of more than ``limit`` entries, as ``Too many``; anything else passes here (its
    type is checked where it is read)."""
    if isinstance(items, (list, dict)) and len(items) > limit:
        return [too_many(path, len(items), limit)]
    return []

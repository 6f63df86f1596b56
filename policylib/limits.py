"""Rule P7: how much of an object a policy reads, bounded before it reads any of it.

Kubernetes sets no count on the lists and maps a policy walks (constraints, selectors, anti-affinity terms,
Volcano tasks and policies, Kubeflow replica specs and template labels): the API server's 3 MiB request body
(``MaxRequestBodyBytes``) is their only bound, and spent on them it holds tens of thousands of entries (43,000
topology spread constraints, 33,000 Volcano tasks, 125,000 labels). A policy does some microseconds of work per
entry it reads (validation, the rewrite, the patch), so each family has a budget of entries (items of lists,
entries of maps, at any depth) in the fields it walks: far past what a workload holds there, and small enough
that a review at the budget costs a few tens of milliseconds (``bench/bench_review_size.py``). Counting stops at
the budget, so the check itself costs no more than the budget. Past it the object is refused before the policy
reads it: a :class:`~policylib.errors.PolicyError` naming the field where the count ran out and the budget,
answered by the webhook's failure mode, never a timeout. Fields no policy walks (containers, env, volumes,
tolerations) are not counted: their cost is the parse, which the request body bounds.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .errors import ErrorType, FieldError

#: The Deployment spread's budget: its selector, its topologySpreadConstraints and its pod anti-affinity.
#: Pods spread over a handful of topology keys (kube-scheduler's default constraints are two) with a selector
#: of a few labels; 2,500 entries hold 350 constraints, or a selector of 2,500 labels.
SPREAD_ENTRIES = 2_500
#: A Volcano Job's budget: its tasks (but their pod templates), their policies and dependencies, the job's
#: policies, volumes and plugins (and the containers of a task with a topologyPolicy, whose CPUs are checked).
#: A task is a role of the job (Volcano's examples have one to three); 1,000 entries hold 250 tasks.
VOLCANO_ENTRIES = 1_000
#: A Kubeflow job's budget: its replica specs' template labels and annotations.
KUBEFLOW_ENTRIES = 2_000
#: An UPDATE's objects (the stored one, and the new one, which usually carries what the policy wrote at CREATE: a
#: ``kubectl apply`` merges onto it) may hold this many times a CREATE's budget: what a policy writes into an object
#: it admitted (the spread's two constraints carry the Deployment's selector; Volcano tasks get a partitionPolicy
#: and RestartPartition policies) keeps it within its next UPDATE's budget.
UPDATE_FACTOR = 5
#: A Kubeflow job's replica specs, one per replica type: training-operator serves at most five types (TFJob:
#: Chief, Master, PS, Worker, Evaluator; PyTorchJob and MPIJob two) and refuses others; Kubernetes' own gang
#: API holds at most 8 pod groups per Workload (``WorkloadMaxPodGroups``).
MAX_REPLICA_TYPES = 8
#: A JobSet's ReplicatedJobs (rule J2): a role each (a leader, workers, a launcher, initializers); Kueue admits at
#: most 8 PodSets per workload (``MaxPodSets``), the most a JobSet it manages can have.
MAX_REPLICATED_JOBS = 8


def budget(entries: int, update: bool) -> int:
    """A family's budget of ``entries`` on CREATE, or on UPDATE (:data:`UPDATE_FACTOR` times it)."""
    return entries * UPDATE_FACTOR if update else entries


def entries_left(value: Any, budget: int, skip: frozenset[str] = frozenset()) -> int:
    """``budget`` less the entries of ``value`` (items of its lists, entries of its maps, at any depth; the values of
    map keys in ``skip`` are not counted, the keys are); the count stops once it is below zero, so a value of any
    size costs at most ``budget`` steps."""
    left = budget
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            left -= len(node)
            if left < 0:
                return left
            stack.extend(v for k, v in node.items() if isinstance(v, (dict, list)) and k not in skip)
        elif isinstance(node, list):
            left -= len(node)
            if left < 0:
                return left
            stack.extend(v for v in node if isinstance(v, (dict, list)))
    return left


def budget_errors(fields: Iterable[tuple[str, Any]], budget: int, scope: str,
                  skip: frozenset[str] = frozenset()) -> list[FieldError]:
    """Rule P7: the entries of ``fields`` (each a field path and its value, counted in order) add up to at most
    ``budget``; else one ``Too many`` error on the field where the count ran out, its value the entries counted
    when it stopped (a bound from below: the count goes no further), its detail the budget and ``scope`` (what
    reads which fields: ``the spread reads ...``). The values of map keys in ``skip`` are not counted (a Volcano
    task's pod template)."""
    left = budget
    for path, value in fields:
        left = entries_left(value, left, skip)
        if left < 0:
            return [FieldError(ErrorType.TOO_MANY, path, budget - left,
                               f"{scope} at most {budget} entries (list items and map keys, at any depth)")]
    return []


def limit_errors(items: Any, path: str, limit: int) -> list[FieldError]:
    """Rule P7: a list (or map) of more than ``limit`` entries, as ``Too many``; anything else passes here (its
    type is checked where it is read)."""
    if isinstance(items, (list, dict)) and len(items) > limit:
        return [FieldError(ErrorType.TOO_MANY, path, len(items),
                           f"must have at most {limit} {'item' if limit == 1 else 'items'}")]
    return []

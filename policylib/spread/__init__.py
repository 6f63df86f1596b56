"""Zone and host topology spread for Deployments (rules S1-S22) and StatefulSets (rules A1-A4).

Each function decides one rule and cites its number in ``docs/specification.md``. The
entry point :func:`mutate_deployment` edits a copy of the Deployment and
returns a :class:`~policylib.result.Result` whose patch is diffed from the
subtrees this policy owns: the pod template's ``topologySpreadConstraints``
and ``affinity``, and this policy's own annotations on the Deployment.

The modules, by what they decide: ``model`` (the record annotations, owned paths and managed keys,
rule S8), ``effective`` (S2), ``shape`` (S1), ``constraints`` (S3-S7), ``anti_affinity`` (S9, S10),
``write`` (S14-S16), ``update`` (S11-S13, S22), ``rollout`` (S19), ``drift`` (S17), ``workload`` (what differs
per kind: A1-A3) and ``mutate`` (the entry points). Every name is re-exported here.
"""
from __future__ import annotations

from ..result import SKIP_KEY
from .anti_affinity import (
    managed_anti_affinity,
    remove_pod_anti_affinity,
    restore_anti_affinity,
    term_selects_own_pods,
    weakened_anti_affinity_warning,
    without_terms,
)
from .constraints import (
    derived_max_skew,
    desired_constraints,
    host_constraint,
    host_spread_enforced,
    spread_label_selector,
    zone_constraint,
)
from .drift import Drift, spread_drift
from .effective import Effective, effective_replicas, hpa_min_replicas
from .model import (
    AFFINITY,
    ANNOTATIONS,
    ANTI_AFFINITY_TERMS,
    AUTOSCALING_MIN_ANNOTATION,
    CONSTRAINTS,
    CONSTRAINTS_PATH,
    HOST_WEAKENED_WARNING,
    OWNED_PATHS,
    PENDING,
    POD_SPEC,
    RECORD_ANNOTATIONS,
    RECORD_KEYS,
    RECORD_REPLICAS,
    RECORD_REQUIRED,
    RECORD_SETTINGS,
    REQUIRED_ANTI_AFFINITY,
    affinity_of,
    constraints_of,
    describe_constraint,
    is_deployment,
    managed_keys,
    recorded_keys,
    recorded_replicas,
    replaced_required_before,
    split_managed,
    template_of,
)
from .mutate import mutate_deployment, mutate_workload
from .rollout import Held, hold_for_next_rollout, pending_note, pending_rewrite
from .shape import SpreadInputs, checked_old_object, deployment_shape_errors, spread_inputs
from .update import (
    brings_new_required_anti_affinity,
    keep_old_placement,
    keep_unwritten_placement,
    remove_restored_anti_affinity,
    restored_anti_affinity,
    update_trigger,
)
from .workload import (
    DEPLOYMENT,
    LEADER_WORKER_SET,
    POD_TEMPLATE_KINDS,
    STATEFULSET,
    PodTemplateKind,
    is_spread_workload,
    pod_template_kind,
    scaled_kind,
)
from .write import invalid_constraint_warnings, matches_current_settings, write_spread

__all__ = [
    "DEPLOYMENT",
    "LEADER_WORKER_SET",
    "POD_TEMPLATE_KINDS",
    "PodTemplateKind",
    "STATEFULSET",
    "is_spread_workload",
    "mutate_workload",
    "pod_template_kind",
    "scaled_kind",
    "AFFINITY",
    "ANNOTATIONS",
    "ANTI_AFFINITY_TERMS",
    "AUTOSCALING_MIN_ANNOTATION",
    "CONSTRAINTS",
    "CONSTRAINTS_PATH",
    "Drift",
    "Effective",
    "HOST_WEAKENED_WARNING",
    "Held",
    "OWNED_PATHS",
    "PENDING",
    "POD_SPEC",
    "RECORD_ANNOTATIONS",
    "RECORD_KEYS",
    "RECORD_REPLICAS",
    "RECORD_REQUIRED",
    "RECORD_SETTINGS",
    "REQUIRED_ANTI_AFFINITY",
    "SKIP_KEY",
    "SpreadInputs",
    "affinity_of",
    "brings_new_required_anti_affinity",
    "checked_old_object",
    "constraints_of",
    "deployment_shape_errors",
    "derived_max_skew",
    "describe_constraint",
    "desired_constraints",
    "effective_replicas",
    "hold_for_next_rollout",
    "host_constraint",
    "host_spread_enforced",
    "hpa_min_replicas",
    "invalid_constraint_warnings",
    "is_deployment",
    "keep_old_placement",
    "keep_unwritten_placement",
    "managed_anti_affinity",
    "managed_keys",
    "matches_current_settings",
    "mutate_deployment",
    "pending_note",
    "pending_rewrite",
    "recorded_keys",
    "recorded_replicas",
    "remove_pod_anti_affinity",
    "remove_restored_anti_affinity",
    "replaced_required_before",
    "restore_anti_affinity",
    "restored_anti_affinity",
    "split_managed",
    "spread_drift",
    "spread_inputs",
    "spread_label_selector",
    "template_of",
    "term_selects_own_pods",
    "update_trigger",
    "weakened_anti_affinity_warning",
    "without_terms",
    "write_spread",
    "zone_constraint",
]

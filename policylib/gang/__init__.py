"""Gang scheduling metadata for Kubeflow TFJob, PyTorchJob and MPIJob (rules G1-G11).

Gang scheduling (all or nothing) gangs every pod of a
distributed job so that all start or none do. The scheduler reads the gang
from metadata on each pod, so this policy writes it on every replica
template, in the keys and API group the configured scheduler reads
(rules G1-G13 of docs/specification.md; upstream sources cited per function):

========================  ==================================================
``gang.method``           what every replica template gets
========================  ==================================================
``labels``                labels ``pod-group.scheduling.sigs.k8s.io/name`` and
                          ``.../min-available`` (ACK, Koordinator)
``podgroup``              the one pod label the scheduler reads; the PodGroup
                          itself is returned in ``Result.extra_objects``
``koordinator``           annotations ``gang.scheduling.koordinator.sh/name``
                          and ``/min-available`` (+ ``/total-number`` and
                          ``/mode`` for scheduler koordinator)
``workload``              label ``policylib.io/scheduling-group``; the webhook
                          writes each Pod's ``spec.schedulingGroup`` from it;
                          the Workload and PodGroup (scheduling.k8s.io, the
                          version the cluster serves) are in
                          ``Result.extra_objects`` (rules G16-G18, G22-G25)
========================  ==================================================

The webhook has no side effects: PodGroups are shown by ``policylib preview``
and created by the controller. Mutations edit a :class:`~policylib.patch.Draft`
and the patch is diffed from the templates' metadata, so a second run is a
no-op.
"""
from __future__ import annotations

from .existing import (
    existing_metadata_findings,
    group_findings,
    minimum_findings,
    ungrouped_types,
    unread_key_findings,
)
from .gangs import (
    HASH_LEN,
    MAX_GANG_NAME,
    Gang,
    GangPlan,
    gang_name,
    job_minimum,
    plan_gangs,
    podgroup_timeout,
    role_gang_name,
)
from .job import (
    KubeflowJob,
    ReplicaType,
    has_scheduling_policy,
    read_job,
    replica_count,
)
from .keys import (
    ACK_GROUPS,
    ACK_MATCH_POLICY,
    API_VERSION,
    GROUPS_KEYS,
    KINDS_BY_API_VERSION,
    KOORD_GROUPS,
    KOORD_MATCH_POLICY,
    KOORD_MIN_AVAILABLE,
    KOORD_MODE,
    KOORD_NAME,
    KOORD_PREFIX,
    KOORD_STRICT,
    KOORD_TOTAL_NUMBER,
    KOORD_WAITING_TIME,
    LEGACY_POD_GROUP_LABEL,
    MIN_AVAILABLE_LABEL,
    MIN_KEYS,
    MPI_V2_API_VERSION,
    NAME_KEYS,
    NAME_KEYS_READ,
    NAME_LABEL,
    POD_GROUP_LABEL,
    PODGROUP_API_VERSION,
    PODGROUP_POD_ANNOTATION,
    PODGROUP_POD_LABEL,
    REPLICA_SPECS,
    SCHEDULING_GROUP_LABEL,
    SIGS_PREFIX,
    VOLCANO_GROUP_NAME,
    is_gang_key,
    is_kubeflow_job,
)
from .match import groups_key, groups_value, match_policy_key
from .metadata import (
    Meta,
    check_emitted,
    current_metadata,
    desired_metadata,
    first_key,
    has_gang,
    metadata_errors,
    pod_metadata,
    validate_gang_labels,
)
from .mutation import mutate_kubeflow_job, training_operator_reason
from .operator import (
    OPERATOR_PODGROUP,
    operator_gang_reason,
    operator_of,
    policylib_gangs_volcano,
    template_scheduler_names,
    volcano_without_gang,
)
from .podgroup import build_podgroups
from .priority import and_list, priority_conflict, priority_violation
from .update import describe_shape, kept_or_dropped, read_old_job, update_gang
from .workload import is_pod, mutate_pod, workload_objects
from .write import (
    GangCase,
    apply_metadata,
    describe_plan,
    leave_existing,
    notes_on_job,
    owned_paths,
    write_gang,
)

__all__ = [
    "API_VERSION", "MPI_V2_API_VERSION", "REPLICA_SPECS", "KINDS_BY_API_VERSION", "SIGS_PREFIX", "NAME_LABEL",
    "MIN_AVAILABLE_LABEL", "ACK_MATCH_POLICY", "ACK_GROUPS", "LEGACY_POD_GROUP_LABEL", "POD_GROUP_LABEL",
    "KOORD_PREFIX", "KOORD_NAME", "KOORD_MIN_AVAILABLE", "KOORD_TOTAL_NUMBER", "KOORD_MODE", "KOORD_WAITING_TIME",
    "KOORD_GROUPS", "KOORD_MATCH_POLICY", "KOORD_STRICT", "VOLCANO_GROUP_NAME", "PODGROUP_API_VERSION",
    "PODGROUP_POD_ANNOTATION",
    "PODGROUP_POD_LABEL", "NAME_KEYS", "NAME_KEYS_READ", "MIN_KEYS", "GROUPS_KEYS", "is_kubeflow_job", "is_gang_key",
    "ReplicaType", "KubeflowJob", "replica_count", "read_job", "has_scheduling_policy", "MAX_GANG_NAME", "HASH_LEN",
    "Gang", "GangPlan", "gang_name", "role_gang_name", "job_minimum", "plan_gangs", "podgroup_timeout", "and_list",
    "priority_conflict", "priority_violation", "match_policy_key", "groups_key", "groups_value", "Meta",
    "pod_metadata", "desired_metadata", "metadata_errors", "validate_gang_labels", "check_emitted",
    "current_metadata", "has_gang", "first_key", "build_podgroups", "ungrouped_types", "minimum_findings",
    "group_findings", "unread_key_findings", "existing_metadata_findings", "GangCase", "describe_plan",
    "notes_on_job", "owned_paths", "apply_metadata", "write_gang", "leave_existing", "read_old_job", "update_gang",
    "kept_or_dropped", "describe_shape", "mutate_kubeflow_job", "training_operator_reason", "OPERATOR_PODGROUP",
    "operator_gang_reason", "operator_of", "template_scheduler_names", "SCHEDULING_GROUP_LABEL",
    "is_pod", "mutate_pod", "workload_objects",
    "policylib_gangs_volcano", "volcano_without_gang"
]

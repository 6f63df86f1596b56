"""The one way policylib talks to the API server: a resource registry, typed errors, paginated lists
and resumable watches, over the ``kubernetes`` client's configuration (auth, TLS, proxy).

Part of the shell (:mod:`policylib.shell`): the policies never import it; the CLI's ``--cluster``
imports it lazily, the controller and the webhook's HPA cache at start. Objects travel as the API
server's JSON, never as the client's model classes, so the policies see exactly what the server
stores, with ``apiVersion`` and ``kind`` filled in (list items omit them).

The modules, by job: ``resources`` (what each resource is called and where it lives, the registry),
``errors`` (the server's failures, typed), ``wire`` (answers decoded, list pages read one by one or ahead),
``client`` (the ``ApiClient`` and :class:`Api`'s typed calls, lists and watches), ``interner`` (what a
snapshot holds), ``snapshot`` (rule W7's paged reads), ``discovery`` (what the server serves) and
``installed`` (the installed webhook configuration's scope and config, rules W5 and C10). Every public name
is named here: callers write ``from policylib.shell import kube`` and ``kube.Api``.
"""
from __future__ import annotations

from .client import (
    CONNECT_SECONDS,
    JSON_PATCH,
    READ_MARGIN_SECONDS,
    Api,
    KubeconfigNotFound,
    api_client,
    in_cluster_client,
    kubeconfig_path,
)
from .discovery import served_api_groups, served_workload_versions, server_version
from .errors import ApiError, Conflict, Forbidden, Gone, NotFound, error_for
from .installed import CONFIG_LABELS, CONTROLLER_LABELS, AmbiguousInstall, installed_config, installed_scope, labelled
from .interner import Interner
from .resources import (
    CONFIGMAPS,
    DEPLOYMENT_PODS,
    DEPLOYMENTS,
    EVENTS,
    GANG_JOBS,
    HPAS,
    HYPERNODES,
    JOBSETS,
    KUBEFLOW_JOBS,
    KUEUE_TOPOLOGIES,
    LEASES,
    METADATA_LIST,
    MPIJOBS,
    MPIJOBS_V2,
    MUTATING_WEBHOOKS,
    NAMESPACES,
    NATIVE_GANG,
    NATIVE_PODGROUPS,
    NATIVE_PODGROUPS_V1ALPHA2,
    NODES,
    NOT_ADMITTED_WORKLOADS,
    PODGROUPS,
    PODS,
    PVCS,
    PVS,
    PYTORCHJOBS,
    REGISTRY,
    SNAPSHOT_RESOURCES,
    STATEFULSET_PODS,
    STATEFULSETS,
    TFJOBS,
    TRAINING_RUNTIMES,
    TRAINJOBS,
    UNHANDLED_WORKLOADS,
    VOLCANO_PODGROUPS,
    WORKLOADS,
    WORKLOADS_V1ALPHA2,
    Resource,
    native_gang_resources,
    resource_for,
    typed,
    webhook_configuration,
)
from .snapshot import snapshot, snapshot_resources, stored_count
from .wire import PAGE, PROJECTED_PAGE, Fetch, continue_token, decode, one_by_one, read_ahead

__all__ = [
    "AmbiguousInstall", "Api", "ApiError", "CONFIGMAPS", "CONFIG_LABELS", "CONNECT_SECONDS", "CONTROLLER_LABELS",
    "Conflict", "DEPLOYMENTS", "DEPLOYMENT_PODS", "EVENTS", "Fetch", "Forbidden", "Gone", "HPAS", "HYPERNODES",
    "TRAINING_RUNTIMES", "STATEFULSET_PODS",
    "KUEUE_TOPOLOGIES",
    "GANG_JOBS", "Interner", "JOBSETS", "JSON_PATCH", "KUBEFLOW_JOBS", "KubeconfigNotFound", "LEASES", "METADATA_LIST",
    "MPIJOBS", "MPIJOBS_V2",
    "MUTATING_WEBHOOKS", "NAMESPACES", "NATIVE_GANG", "NATIVE_PODGROUPS", "NATIVE_PODGROUPS_V1ALPHA2", "NODES",
    "NotFound", "PAGE", "PODGROUPS", "PODS", "PROJECTED_PAGE", "PVCS", "PVS", "PYTORCHJOBS",
    "READ_MARGIN_SECONDS", "REGISTRY", "Resource", "SNAPSHOT_RESOURCES", "STATEFULSETS", "TFJOBS", "TRAINJOBS",
    "UNHANDLED_WORKLOADS", "NOT_ADMITTED_WORKLOADS", "VOLCANO_PODGROUPS", "WORKLOADS",
    "WORKLOADS_V1ALPHA2", "api_client", "continue_token", "decode", "error_for", "in_cluster_client",
    "installed_config", "installed_scope", "kubeconfig_path", "labelled", "native_gang_resources", "one_by_one",
    "read_ahead", "resource_for", "served_api_groups", "served_workload_versions", "server_version", "snapshot",
    "snapshot_resources", "stored_count", "typed", "webhook_configuration",
]

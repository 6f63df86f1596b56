"""``--cluster``: the live cluster as the commands read it, through one client per command.

:func:`cluster` gives a command its :class:`Cluster`: the API client built once from ``--kubeconfig``
and ``--context``, and :meth:`Cluster.reading`, which turns a failure to read the cluster (no or a bad
kubeconfig, the network, an error the API server answers) into one clear line, exit 2. Only those: a
programming error raises with its traceback. The Kubernetes client is imported here only when a
command reads the cluster (rule L1: the base install has none).
"""
from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, Sequence, TextIO, cast

from ..config import Config
from ..constants import CONFIG_KEY
from ..errors import InputError
from ..projection import project, project_simulated
from ..shell.files import load_config, load_config_file, load_config_text

if TYPE_CHECKING:
    from ..shell import kube


def refuse_kube_version_with_cluster(args: argparse.Namespace) -> None:
    """``--kube-version`` decides shapes for files (rule G22); ``--cluster`` reads what the API server serves."""
    if getattr(args, "cluster", False) and getattr(args, "kube_version", None) is not None:
        raise InputError("--kube-version is for files; with --cluster the API server's own versions are read")


def require_cluster_client(args: argparse.Namespace) -> None:
    """``--cluster`` reads the cluster through the Kubernetes client, which only ``pip install
    'policylib[webhook]'`` installs: without it, one line naming the extra, exit 2 (rule L1)."""
    import importlib.util
    if getattr(args, "cluster", False) and importlib.util.find_spec("kubernetes") is None:
        raise InputError("--cluster needs the Kubernetes client, which this install of policylib leaves out: "
                         "pip install 'policylib[webhook]'")


#: What a command imports that ``pip install policylib`` brings but an install of the server alone (the server's image,
#: docs/install.md) leaves out: {command: ((module, distribution), ...)}.
OFFLINE_PACKAGES: dict[str, tuple[tuple[str, str], ...]] = {
    "preview": (("kubernetes_validate", "kubernetes-validate"),),   # the schemas of rule D2
    "simulate": (("numpy", "numpy"),),
    "check": (("numpy", "numpy"),),
}


def require_offline_packages(args: argparse.Namespace) -> None:
    """A command whose package this install leaves out (an install of the server alone, as in its image): one line
    naming the package, exit 2, never a traceback (rule L6)."""
    import importlib.util
    for module, distribution in OFFLINE_PACKAGES.get(getattr(args, "command", ""), ()):
        if importlib.util.find_spec(module) is None:
            raise InputError(f"{args.command} needs {distribution}, which this install of policylib leaves out: "
                             "pip install policylib")


def unreadable() -> tuple[type[Exception], ...]:
    """What reading the cluster raises when the cluster, not this program, is at fault: no kubeconfig, one the
    client cannot load (its YAML, its context), the network (connect, TLS, read), or an error status the API
    server answers."""
    import yaml
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException
    from urllib3.exceptions import HTTPError

    from ..shell import kube
    return (kube.ApiError, kube.KubeconfigNotFound, ConfigException, yaml.YAMLError, ApiException, HTTPError, OSError)


class Cluster:
    """The cluster one command reads: one API client (from ``--kubeconfig`` and ``--context``) for every
    read, made on first use."""

    def __init__(self, context: str | None, kubeconfig: str | None):
        self.context, self.kubeconfig = context, kubeconfig

    @cached_property
    def api(self) -> kube.Api:
        """The client; build it inside :meth:`reading` (a missing kubeconfig is the cluster's fault)."""
        from ..shell import kube
        return kube.Api(kube.api_client(self.context, self.kubeconfig))

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Reads of the cluster: a failure of the cluster (see :func:`unreadable`) becomes one user error,
        ``cannot read the cluster: ...``; any other exception is left to raise."""
        try:
            yield
        except unreadable() as e:
            raise InputError(f"cannot read the cluster: {e}") from None


def cluster(args: argparse.Namespace) -> Cluster:
    """The command's one :class:`Cluster` (kept on ``args``, so the config, the scope and the objects are
    read through the same client)."""
    found = getattr(args, "_cluster", None)
    if found is None:
        found = args._cluster = Cluster(args.context, args.kubeconfig)
    return cast(Cluster, found)


def resolve_config(args: argparse.Namespace, stderr: TextIO) -> Config:
    """Rule C10: the config a command uses. ``--config`` (a configuration or the chart's values file, rule
    C9); else, with ``--cluster``, the installed one the controller reads (its ConfigMap, found by the
    chart's labels, or of ``--release``); else the defaults. With ``--cluster`` one stderr line says which."""
    cached = getattr(args, "_config", None)
    if cached is not None:
        return cast(Config, cached)
    live = getattr(args, "cluster", False)
    release_namespace = None
    if args.config is not None:
        config, what = load_config_file(args.config)
    elif live:
        from ..shell import kube
        c = cluster(args)
        with c.reading():
            try:
                found, where = kube.installed_config(c.api, getattr(args, "release", None), args.namespace)
            except kube.AmbiguousInstall as e:
                raise InputError(str(e)) from None
        if found is None:
            if getattr(args, "release", None):
                raise InputError(f"{where}: check the name (helm list -A), or give --config FILE")
            config, what = load_config(None), f"the defaults ({where}; give --config FILE to use another)"
        else:
            text = (found.get("data") or {}).get(CONFIG_KEY)
            if text is None:
                raise InputError(f"ConfigMap {where}: no {CONFIG_KEY} key: give --config FILE")
            config, _ = load_config_text(text, f"ConfigMap {where}")
            release_namespace = where.split("/")[0]
            what = f"ConfigMap {where} (the installed controller's)"
    else:
        config, what = load_config(None), "the defaults"
    if live:
        stderr.write(f"policylib: config: {what}\n")
    args._config, args._release_namespace = config, release_namespace
    return config


def cluster_scope(args: argparse.Namespace, stderr: TextIO) -> Callable[[dict[str, Any]], bool]:
    """Rules W5, W6 for ``--cluster``: whether the installed webhook configuration sends an object to the
    webhook (never in the release's namespace); one stderr line says which configuration was read, and a
    warning what the scope leaves out and why (as the controller, nothing without the configuration)."""
    from ..scope import RESOURCES
    from ..shell import kube
    c = cluster(args)
    with c.reading():
        scope, labels = kube.installed_scope(c.api, args.webhook_configuration,
                                             getattr(args, "_release_namespace", None))
    never = f"; never namespace(s) {', '.join(sorted(scope.excluded_namespaces))}" if scope.excluded_namespaces else ""
    stderr.write(f"policylib: scope: {scope.source}{never}\n")
    stderr.writelines(f"policylib: warning: scope: {note}\n" for note in scope.notes())
    args._scope_stopped = scope.stopped
    args._scope_selects = lambda obj: scope.selects(obj, labels)   # rule P9: the kinds no webhook's rules cover

    def admitted(obj: dict[str, Any]) -> bool:
        group = str(obj.get("apiVersion") or "").rpartition("/")[0]
        if (group, obj.get("kind")) not in RESOURCES or obj.get("kind") == "Pod":
            return True   # context (HPAs, PodGroups, Pods as load): read whatever the scope
        return bool(scope.admits(obj, labels))
    return admitted


def planned_objects(args: argparse.Namespace, config: Config, stderr: TextIO,
                    show: Callable[[str, int], None]) -> list[dict[str, Any]]:
    """What ``plan --cluster`` reads: the objects the planners read for ``config``, projected (rule W7), and the
    runtimes a TrainJob's gang is computed from (rule T7)."""
    from ..shell import kube
    c = cluster(args)
    with c.reading():
        objects = kube.snapshot(c.api, args.namespace, resources=kube.snapshot_resources(config),
                                progress=show, project=project, limit=kube.PROJECTED_PAGE)
        if any(o.get("kind") == kube.TRAINJOBS.kind for o in objects):
            objects += live_runtimes(c.api, stderr)
    if stderr.isatty():
        stderr.write("\n")
    return objects


def deployment_pods_and_nodes(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """What ``plan --cluster`` reads for rules S25 and S28: the pods Deployments and StatefulSets made (only what
    the pod costs read of each) and the Nodes (what the replay reads of them, rule W7)."""
    from ..scaledown import project_pod
    from ..shell import kube
    c = cluster(args)
    with c.reading():
        pods = kube.snapshot(c.api, args.namespace, resources=(kube.DEPLOYMENT_PODS, kube.STATEFULSET_PODS),
                             project=project_pod,
                             limit=kube.PROJECTED_PAGE)
        nodes = kube.snapshot(c.api, resources=(kube.NODES,), project=project_simulated, limit=kube.PROJECTED_PAGE)
    return pods, nodes


def strip_pod(pod: Any) -> Any:
    """A Pod as :func:`~policylib.projection.project_simulated` keeps it (rule W7), plus the ``managedFields``
    entry that owns its deletion cost (rule S25: whose cost it is decides whether ``simulate --scale`` counts it
    as the controller's or another manager's)."""
    from ..scaledown import project_pod
    kept = project_simulated(pod)
    owner = project_pod(pod)["metadata"].get("managedFields") if isinstance(pod, dict) else None
    if owner and isinstance(kept, dict):
        kept = {**kept, "metadata": {**(kept.get("metadata") or {}), "managedFields": owner}}
    return kept


def live(args: argparse.Namespace, stderr: TextIO, workloads: bool,
         show: Callable[[str, int], None]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    """Nodes, Pods, Volcano's HyperNodes (and, for ``workloads``, Deployments, HPAs, jobs and PodGroups) and the
    version of the live cluster; of each object only what the planners, ``check`` and the scheduler's replay read (rule W7)."""
    from ..shell import kube
    config = resolve_config(args, stderr)
    resources = kube.snapshot_resources(config)
    c = cluster(args)
    page = kube.PROJECTED_PAGE
    with c.reading():
        # the containers the replay reads make most of what is held alike: each equal part held once
        nodes = kube.snapshot(c.api, resources=(kube.NODES,), project=project_simulated, limit=page, share=True)
        pods = kube.snapshot(c.api, resources=(kube.PODS,), project=strip_pod, limit=page,
                             share=True)   # every Pod loads the Nodes
        objects = kube.snapshot(c.api, args.namespace, resources=resources, progress=show,
                                project=project_simulated, limit=page, share=True) if workloads else []
        if config.volcano.enabled:
            objects += live_hypernodes(c.api, stderr)
        objects += live_runtimes(c.api, stderr)
        if config.topology.levels:
            objects += live_kueue_topologies(c.api, stderr)
        if workloads and config.statefulSets.enabled:
            objects += live_volumes(c.api, args.namespace, stderr)
        version = kube.server_version(c.api)
    return nodes, pods + objects, version


def listed_or_warned(api: Any, reads: Sequence[tuple[Any, str | None]], without: str, stderr: TextIO,
                     project: Callable[[dict[str, Any]], Any] | None = None) -> list[dict[str, Any]]:
    """The objects of each ``(resource, namespace)`` of ``reads``, where the cluster serves them (none where it does
    not); a resource the user may not list is named in one warning saying what goes on ``without`` it (``{kind}``
    there is the resource's kind)."""
    from ..shell import kube
    found: list[dict[str, Any]] = []
    for res, ns in reads:
        try:
            found += kube.snapshot(api, ns, resources=(res,), project=project, limit=kube.PROJECTED_PAGE)
        except kube.Forbidden as e:
            name = f"{res.plural}.{res.group}" if res.group else res.plural
            stderr.write(f"policylib: warning: cannot list {name}: {e}; {without.format(kind=res.kind)}\n")
    return found


def live_volumes(api: Any, namespace: str | None, stderr: TextIO) -> list[dict[str, Any]]:
    """Rules A7, A8: the PersistentVolumeClaims (of ``namespace``, or all) and the PersistentVolumes, what pins a
    StatefulSet's ordinals to zones; checked without them where the user may not list them."""
    from ..shell import kube
    return listed_or_warned(api, ((kube.PVCS, namespace), (kube.PVS, None)),
                            "StatefulSets are checked without their volumes' zones", stderr, project_simulated)


def live_hypernodes(api: Any, stderr: TextIO) -> list[dict[str, Any]]:
    """Rule V26: the cluster's Volcano HyperNodes; Volcano Jobs are checked without them where the user may not list
    them."""
    from ..shell import kube
    return listed_or_warned(api, ((kube.HYPERNODES, None),),
                            "Volcano Jobs are checked without the cluster's HyperNodes", stderr)


def live_runtimes(api: Any, stderr: TextIO) -> list[dict[str, Any]]:
    """Rules T1, T5: the cluster's Kubeflow Trainer runtimes (TrainingRuntimes of every namespace and
    ClusterTrainingRuntimes), so a TrainJob is placed and checked with the runtime it names; a TrainJob whose runtime
    the user may not list is left unplaced with the reason."""
    from ..shell import kube
    return listed_or_warned(api, tuple((res, None) for res in kube.TRAINING_RUNTIMES),
                            "a TrainJob that names a {kind} is not placed", stderr)


def live_kueue_topologies(api: Any, stderr: TextIO) -> list[dict[str, Any]]:
    """Rule N10: Kueue's Topologies, for the declared levels to be compared with; the declaration is checked
    without them where the user may not list them."""
    from ..shell import kube
    return listed_or_warned(api, ((kube.KUEUE_TOPOLOGIES, None),),
                            "the declared topology is checked without Kueue's Topologies", stderr)


def unhandled_workloads(args: argparse.Namespace, stderr: TextIO) -> list[dict[str, Any]]:
    """Rules P9 and P10, ``check --cluster``: the objects of the kinds that run pods and that no family handles (and
    of those no webhook entry sends), as their
    metadata (name, namespace, labels), where the cluster serves the kind; an object a controller owns (a
    Deployment's ReplicaSets, a JobSet's Jobs) is counted as its owner. A kind the user may not list is named in
    a warning and left out of the count."""
    from ..shell import kube
    c = cluster(args)
    found: list[dict[str, Any]] = []
    with c.reading():
        for res in kube.UNHANDLED_WORKLOADS + kube.NOT_ADMITTED_WORKLOADS:   # rules P9, P10
            try:
                items = kube.snapshot(c.api, args.namespace, resources=(res,), project=_counted, limit=kube.PAGE)
            except kube.Forbidden as e:
                stderr.write(f"policylib: warning: cannot list {res.plural}.{res.group or 'core'}: {e}; "
                             f"{res.kind} objects are not counted\n")
                continue
            found += [o for o in items if o is not None]
    return found


def _counted(obj: Any) -> dict[str, Any] | None:
    """What counting an unhandled object reads of it (its kind, name, namespace and labels), or None for one a
    controller owns."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return None
    owners = meta.get("ownerReferences")
    if isinstance(owners, list) and any(isinstance(o, dict) and o.get("controller") for o in owners):
        return None
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
            "metadata": {k: meta[k] for k in ("name", "namespace", "labels") if k in meta}}


def workload_api(args: argparse.Namespace, config: Config) -> Any:
    """Rule G22: what the cluster serves of Kubernetes' Workload API: ``--kube-version``'s minor offline; with
    ``--cluster`` (gang method workload only) the versions its discovery lists and the minor of its
    ``/version``; None when neither is given (the policies then assume Kubernetes 1.37)."""
    from ..workload_api import resolve
    setting = config.gang.workloadAPIVersion
    refuse_kube_version_with_cluster(args)
    if getattr(args, "kube_version", None) is not None:
        return resolve(setting, minor=args.kube_version)
    if not getattr(args, "cluster", False) or not config.gang.enabled or config.gang.method != "workload":
        return None
    found = getattr(args, "_workload_api", None)
    if found is None:
        from ..shell import kube
        c = cluster(args)
        with c.reading():
            served = kube.served_workload_versions(c.api)
            found = args._workload_api = resolve(setting, served, server_minor(kube.server_version(c.api)))
    return found


def server_minor(git_version: str) -> int | None:
    """The minor of an API server's ``gitVersion`` (None for one that is not ``v1.N...``)."""
    from ..workload_api import parse_kube_version
    try:
        return parse_kube_version(git_version)
    except InputError:
        return None


def stored_native(args: argparse.Namespace, api: Any) -> dict[tuple[str, str], int]:
    """Rule G24, ``check --cluster``: how many Workloads and PodGroups the cluster stores in each Workload API
    version its next minor removes (listed through that version while it is still served)."""
    from ..shell import kube
    from ..workload_api import api_version, removed_by_upgrade, resources_of
    upgrade = removed_by_upgrade(api.minor) if api is not None and api.minor is not None else None
    if not upgrade:
        return {}
    out: dict[tuple[str, str], int] = {}
    c = cluster(args)
    with c.reading():
        for version in upgrade[1]:
            for res in kube.native_gang_resources(version):
                if res.plural not in resources_of(version):
                    continue
                count = kube.stored_count(c.api, res)
                if count is not None:
                    out[(api_version(version), res.plural)] = count
    return out


def topology_kept(args: argparse.Namespace, config: Config, api: Any) -> bool | None:
    """Rule G25, ``check --cluster`` with ``gang.topology``: whether kube-apiserver keeps a PodGroup's
    ``schedulingConstraints`` (it drops them when its TopologyAwareWorkloadScheduling gate is off), asked by a
    server-side dry-run create in the namespace of ``-n`` (default ``default``); None when it cannot tell (no
    version served, or the create is not allowed)."""
    from ..gang.topology import gang_topology
    from ..shell import kube
    level = gang_topology(config)
    if level is None or api is None or api.version is None:
        return None
    from ..gang.workload import gang_policy, scheduling_constraints
    namespace = args.namespace or "default"
    res = kube.native_gang_resources(api.version)[1]
    # no reference to a Workload: the API server's admission refuses a PodGroup whose Workload does not exist
    probe = {"apiVersion": res.api_version, "kind": "PodGroup",
             "metadata": {"name": "policylib-check-topology", "namespace": namespace},
             "spec": {"schedulingPolicy": gang_policy(1), **scheduling_constraints(level)}}
    c = cluster(args)
    try:
        with c.reading():
            created = c.api.request("POST", res.path(namespace), query=[("dryRun", "All")], body=probe,
                                    content_type="application/json")
    except InputError:
        return None
    return bool(((created or {}).get("spec") or {}).get("schedulingConstraints"))


def served_apis(args: argparse.Namespace) -> list[str]:
    """``group/version`` of every API group the live cluster serves (its ``/apis`` discovery document)."""
    from ..shell import kube
    c = cluster(args)
    with c.reading():
        return kube.served_api_groups(c.api)

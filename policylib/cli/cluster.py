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
from typing import TYPE_CHECKING, Any, Callable, TextIO, cast

from ..config import Config
from ..errors import InputError
from ..projection import project, project_simulated
from ..shell.files import load_config, load_config_file, load_config_text

if TYPE_CHECKING:
    from ..shell import kube


def require_cluster_client(args: argparse.Namespace) -> None:
    """``--cluster`` reads the cluster through the Kubernetes client, which only ``pip install
    'policylib[webhook]'`` installs: without it, one line naming the extra, exit 2 (rule L1)."""
    import importlib.util
    if getattr(args, "cluster", False) and importlib.util.find_spec("kubernetes") is None:
        raise InputError("--cluster needs the Kubernetes client, which this install of policylib leaves out: "
                         "pip install 'policylib[webhook]'")


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
            text = (found.get("data") or {}).get(kube.CONFIG_KEY)
            if text is None:
                raise InputError(f"ConfigMap {where}: no {kube.CONFIG_KEY} key: give --config FILE")
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

    def admitted(obj: dict[str, Any]) -> bool:
        group = str(obj.get("apiVersion") or "").rpartition("/")[0]
        if (group, obj.get("kind")) not in RESOURCES or obj.get("kind") == "Pod":
            return True   # context (HPAs, PodGroups, Pods as load): read whatever the scope
        return bool(scope.admits(obj, labels))
    return admitted


def planned_objects(args: argparse.Namespace, config: Config, stderr: TextIO,
                    show: Callable[[str, int], None]) -> list[dict[str, Any]]:
    """What ``plan --cluster`` reads: the objects the planners read for ``config``, projected (rule W7)."""
    from ..shell import kube
    c = cluster(args)
    with c.reading():
        objects = kube.snapshot(c.api, args.namespace, resources=kube.snapshot_resources(config),
                                progress=show, project=project, limit=kube.PROJECTED_PAGE)
    if stderr.isatty():
        stderr.write("\n")
    return objects


def deployment_pods_and_nodes(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """What ``plan --cluster`` reads for rules S25 and S28: the pods Deployments made (only what the pod
    costs read of each) and the Nodes (what the replay reads of them, rule W7)."""
    from ..scaledown import project_pod
    from ..shell import kube
    c = cluster(args)
    with c.reading():
        pods = kube.snapshot(c.api, args.namespace, resources=(kube.DEPLOYMENT_PODS,), project=project_pod,
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
    """Nodes, Pods (and, for ``workloads``, Deployments, HPAs, jobs and PodGroups) and the version of the live
    cluster; of each object only what the planners, ``check`` and the scheduler's replay read (rule W7)."""
    from ..shell import kube
    resources = kube.snapshot_resources(resolve_config(args, stderr))
    c = cluster(args)
    page = kube.PROJECTED_PAGE
    with c.reading():
        nodes = kube.snapshot(c.api, resources=(kube.NODES,), project=project_simulated, limit=page)
        pods = kube.snapshot(c.api, resources=(kube.PODS,), project=strip_pod, limit=page)   # every Pod loads the Nodes
        objects = kube.snapshot(c.api, args.namespace, resources=resources, progress=show,
                                project=project_simulated, limit=page) if workloads else []
        version = kube.server_version(c.api)
    return nodes, pods + objects, version


def workload_api_served(args: argparse.Namespace) -> bool:
    """Whether the live cluster serves scheduling.k8s.io/v1alpha2 (its discovery document answers; rule G20)."""
    from ..shell import kube
    c = cluster(args)
    with c.reading():
        try:
            found = c.api.request("GET", f"/apis/{kube.WORKLOADS.group}/{kube.WORKLOADS.version}")
        except kube.NotFound:
            return False
    return any(isinstance(r, dict) and r.get("name") == kube.WORKLOADS.plural for r in (found or {}).get("resources") or [])


def served_apis(args: argparse.Namespace) -> list[str]:
    """``group/version`` of every API group the live cluster serves (its ``/apis`` discovery document)."""
    from ..shell import kube
    c = cluster(args)
    with c.reading():
        return kube.served_api_groups(c.api)

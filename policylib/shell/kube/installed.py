"""What is installed, as ``plan``/``check --cluster`` read it: the webhook configuration's scope (rule W5) and the
config the controller reads (rule C10)."""
from __future__ import annotations

from typing import Any

from ...constants import CONFIG_KEY, CONFIG_MAP, CONTROLLER_NAME, WEBHOOK_NAME
from .client import Api
from .errors import Forbidden, NotFound
from .resources import CONFIGMAPS, DEPLOYMENTS, MUTATING_WEBHOOKS, NAMESPACES, Resource, typed
from .wire import PAGE


def labelled(api: Api, res: Resource, selector: str, namespace: str | None = None) -> list[dict[str, Any]]:
    """Every object of ``res`` carrying the labels ``selector`` (a label selector string)."""
    items: list[dict[str, Any]] = []
    token = None
    while True:
        query: list[tuple[str, Any]] = [("labelSelector", selector), ("limit", PAGE)]
        body = api.request("GET", res.path(namespace), query=query + ([("continue", token)] if token else []))
        items += [typed(res, item) for item in body.get("items") or []]
        token = (body.get("metadata") or {}).get("continue")
        if not token:
            return items


def installed_scope(api: Api, name: str, release_namespace: str | None = None) -> tuple[Any, dict[str, dict[str, str]]]:
    """Rule W5 for ``plan``/``check --cluster``: the :class:`policylib.scope.Scope` of the installed
    MutatingWebhookConfiguration ``name`` and every Namespace's labels. As the controller's, it fails
    closed: nothing is in it when the configuration is not installed, or the user may not read it or list
    the Namespaces (their labels decide the selectors); its ``closed`` says why. ``release_namespace`` is
    never in scope (rule W6)."""
    from ...scope import closed_scope, namespace_labels, scope_from_configuration
    excluded = {release_namespace} if release_namespace else set()
    try:
        configuration = api.get(MUTATING_WEBHOOKS, None, name)
    except NotFound:
        return closed_scope(f"no MutatingWebhookConfiguration {name} is installed", excluded), {}
    except Forbidden:   # a user who may read workloads but not admission configurations: say so
        return closed_scope(f"MutatingWebhookConfiguration {name} cannot be read (forbidden)", excluded), {}
    scope = scope_from_configuration(configuration, excluded)
    try:
        namespaces, _ = api.list(NAMESPACES)
    except NotFound:   # no Namespace list served: each has only the name label the API server sets
        namespaces = []
    except Forbidden:
        return closed_scope(f"Namespaces cannot be listed (forbidden): the selectors of {scope.source} match their "
                            "labels", scope.excluded_namespaces, scope.source), {}
    return scope, namespace_labels(namespaces)


#: The labels the chart and manifests/ put on the controller's Deployment and on the config's ConfigMap.
CONTROLLER_LABELS = f"app.kubernetes.io/name={CONTROLLER_NAME}"
CONFIG_LABELS = f"app.kubernetes.io/name={WEBHOOK_NAME}"


def _configmap_volumes(deployment: dict[str, Any]) -> list[str]:
    spec = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    return [v["configMap"]["name"] for v in spec.get("volumes") or []
            if isinstance(v, dict) and isinstance(v.get("configMap"), dict) and v["configMap"].get("name")]


class AmbiguousInstall(ValueError):
    """More than one installed policylib config, and nothing says which: the message names them."""


def installed_config(api: Api, release: str | None = None,
                     namespace: str | None = None) -> tuple[dict[str, Any] | None, str]:
    """Rule C10: the ConfigMap holding the config the installed controller reads (the one its Deployment
    mounts; else the chart's labelled ``policylib-config``), as (the ConfigMap, its namespace/name), or
    (None, why none) when nothing is installed. ``release`` keeps the objects of that Helm release
    (``app.kubernetes.io/instance``); ``namespace`` prefers, then requires, that namespace when more
    than one is found. Raises :class:`AmbiguousInstall` naming the candidates when it cannot choose."""
    instance = f",app.kubernetes.io/instance={release}" if release else ""
    found: dict[tuple[str, str], str] = {}
    for d in labelled(api, DEPLOYMENTS, CONTROLLER_LABELS + instance):
        ns = (d.get("metadata") or {}).get("namespace") or "default"
        for cm in _configmap_volumes(d):
            found[(ns, cm)] = f"mounted by Deployment {ns}/{d['metadata'].get('name')}"
    if not found:
        try:
            configmaps = labelled(api, CONFIGMAPS, CONFIG_LABELS + instance)
        except NotFound:
            configmaps = []
        for configmap in configmaps:
            meta = configmap.get("metadata") or {}
            if str(meta.get("name", "")).startswith(CONFIG_MAP) and CONFIG_KEY in (configmap.get("data") or {}):
                found[(meta.get("namespace") or "default", meta["name"])] = "labelled " + CONFIG_LABELS
    if len(found) > 1 and namespace:
        found = {k: v for k, v in found.items() if k[0] == namespace} or found
    if len(found) > 1:
        names = ", ".join(f"{ns}/{name}" for ns, name in sorted(found))
        raise AmbiguousInstall(f"more than one installed policylib config ({names}): name one with --release "
                         "(and -n NAMESPACE), or give --config FILE")
    if not found:
        return None, (f"no policylib controller or config of release {release!r} found" if release else
                      "no policylib controller or config found")
    (ns, name), _how = next(iter(found.items()))
    return api.get(CONFIGMAPS, ns, name), f"{ns}/{name}"

"""The webhook's scope (pure): which objects the installed MutatingWebhookConfiguration sends to the
webhook, so that the controller and ``plan``/``check --cluster`` act on exactly those (rules W5, W6).

The scope fails closed (rule W5): without the configuration, or with one whose selectors the API server
would refuse, nothing is in it; a webhook with ``matchConditions`` adds nothing to it. Those CEL expressions
are evaluated by the API server per request, on the request as much as on the object (who sends it, a dry
run, an authorizer check), which no reading of the object can decide; an object is in scope only when a
webhook without them would be sent it.

Label selectors are evaluated as ``k8s.io/apimachinery``'s ``metav1.LabelSelectorAsSelector`` does:
``matchLabels`` entries are ``key = value`` requirements, ``matchExpressions`` are ``In``, ``NotIn``,
``Exists`` and ``DoesNotExist``, every requirement must hold, an empty selector (``{}``) matches
everything and a missing one (``None``) matches nothing. A webhook's missing ``namespaceSelector`` or
``objectSelector`` is defaulted to ``{}`` by the API server, and so is here.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Mapping, Sequence

from .constants import (
    APPS_GROUP,
    INSTALL_NAMESPACE,
    JOBSET_GROUP,
    JOBSET_VERSION,
    KUBEFLOW_GROUP,
    KUBEFLOW_VERSION,
    LWS_GROUP,
    LWS_VERSION,
    MPI_V2_VERSION,
    TRAINER_GROUP,
    TRAINER_VERSION,
    VOLCANO_BATCH_GROUP,
    VOLCANO_JOB_VERSION,
    WEBHOOK_CONFIGURATION,
)
from .errors import InputError

#: The label the API server sets on every Namespace (NamespaceDefaultLabelName, Kubernetes 1.21+).
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")

#: The plural resource of each kind policylib's webhooks receive and its controller writes (the rules of a
#: webhook name resources, objects name kinds).
RESOURCES = {
    (TRAINER_GROUP, "TrainJob"): "trainjobs",
    (APPS_GROUP, "Deployment"): "deployments",
    (APPS_GROUP, "StatefulSet"): "statefulsets",
    (LWS_GROUP, "LeaderWorkerSet"): "leaderworkersets",
    (VOLCANO_BATCH_GROUP, "Job"): "jobs",
    (KUBEFLOW_GROUP, "TFJob"): "tfjobs",
    (KUBEFLOW_GROUP, "PyTorchJob"): "pytorchjobs",
    (KUBEFLOW_GROUP, "MPIJob"): "mpijobs",
    (JOBSET_GROUP, "JobSet"): "jobsets",
    ("", "Pod"): "pods",
}


class SelectorError(InputError):
    """A label selector the API server would refuse; names the field and the value."""


def _requirements(selector: Mapping[str, Any], where: str) -> list[tuple[str, str, frozenset[str]]]:
    """The selector as (key, operator, values) requirements, checked as the API server validates them."""
    if not isinstance(selector, Mapping):
        raise SelectorError(f"{where}: must be a mapping, got {type(selector).__name__}")
    out: list[tuple[str, str, frozenset[str]]] = []
    match_labels = selector.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        raise SelectorError(f"{where}.matchLabels: must be a mapping of label to value")
    for key, value in match_labels.items():
        if not isinstance(value, str):
            raise SelectorError(f"{where}.matchLabels.{key}: value must be a string, got {value!r}")
        out.append((str(key), "In", frozenset({value})))
    expressions = selector.get("matchExpressions") or []
    if not isinstance(expressions, list):
        raise SelectorError(f"{where}.matchExpressions: must be a list")
    for i, expr in enumerate(expressions):
        at = f"{where}.matchExpressions[{i}]"
        if not isinstance(expr, Mapping) or not isinstance(expr.get("key"), str) or not expr.get("key"):
            raise SelectorError(f"{at}.key: required")
        op, values = expr.get("operator"), expr.get("values") or []
        if op not in OPERATORS:
            raise SelectorError(f"{at}.operator: unsupported value {op!r}: supported values: {', '.join(OPERATORS)}")
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise SelectorError(f"{at}.values: must be a list of strings")
        if op in ("In", "NotIn") and not values:
            raise SelectorError(f"{at}.values: must be specified when operator is {op}")
        if op in ("Exists", "DoesNotExist") and values:
            raise SelectorError(f"{at}.values: may not be specified when operator is {op}")
        out.append((expr["key"], op, frozenset(values)))
    return out


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str] | None,
                     where: str = "selector") -> bool:
    """Whether ``labels`` satisfy ``selector`` (``LabelSelectorAsSelector(selector).Matches(labels)``):
    ``None`` matches nothing, ``{}`` everything. Raises :class:`SelectorError` for an invalid selector."""
    if selector is None:
        return False
    return _satisfied(_requirements(selector, where), labels or {})


def _satisfied(requirements: list[tuple[str, str, frozenset[str]]], labels: Mapping[str, str]) -> bool:
    for key, op, values in requirements:
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _group(api_version: str) -> str:
    return api_version.split("/")[0] if "/" in api_version else ""


def _rule_covers(rule: Mapping[str, Any], group: str, resource: str) -> bool:
    """A webhook rule that sends CREATE or UPDATE of ``group``/``resource`` (any version: the chart and
    manifests use ``matchPolicy: Equivalent``)."""
    groups, resources = rule.get("apiGroups") or [], rule.get("resources") or []
    operations = rule.get("operations") or []
    return ((group in groups or "*" in groups) and (resource in resources or "*" in resources)
            and any(op in ("CREATE", "UPDATE", "*") for op in operations)
            and rule.get("scope", "*") in ("*", "Namespaced"))


@dataclass(frozen=True)
class Hook:
    """One webhook of the configuration: its name, rules and selectors (``{}`` where the API defaults),
    and the names of its ``matchConditions`` (a webhook with any adds nothing to the scope)."""

    name: str
    rules: tuple[Mapping[str, Any], ...]
    namespace_selector: Mapping[str, Any]
    object_selector: Mapping[str, Any]
    match_conditions: tuple[str, ...] = ()

    @cached_property
    def requirements(self) -> tuple[list[tuple[str, str, frozenset[str]]], list[tuple[str, str, frozenset[str]]]]:
        """The namespace and object selectors as requirements, read once (not per object it is asked about);
        :class:`SelectorError` for one the API server would refuse."""
        return (_requirements(self.namespace_selector, f"{self.name}.namespaceSelector"),
                _requirements(self.object_selector, f"{self.name}.objectSelector"))


@dataclass(frozen=True)
class Scope:
    """Rules W5, W6: what the installed webhook configuration sends to the webhook, and the namespaces
    never acted on (the release's own). ``source`` says where it was read, for messages; ``closed`` why
    nothing is in it (no configuration, an unreadable one), empty when its webhooks decide."""

    hooks: tuple[Hook, ...]
    excluded_namespaces: frozenset[str] = frozenset()
    source: str = ""
    closed: str = ""

    @property
    def acting(self) -> tuple[Hook, ...]:
        """Rule W5: the webhooks whose objects are acted on: those without ``matchConditions``."""
        return tuple(h for h in self.hooks if not h.match_conditions)

    @property
    def skipped(self) -> tuple[Hook, ...]:
        """Rule W5: the webhooks whose objects are not acted on for their ``matchConditions``."""
        return tuple(h for h in self.hooks if h.match_conditions)

    @property
    def stopped(self) -> str:
        """Rule W5: why nothing at all is acted on; empty when some webhook's objects are."""
        if self.closed:
            return self.closed
        if not self.hooks:
            return f"{self.source} has no webhooks"
        if not self.acting:
            return f"every webhook of {self.source} has matchConditions"
        return ""

    def notes(self) -> list[str]:
        """Rule W5: what the scope leaves out and why, one message each (empty when nothing is)."""
        if self.stopped:
            return [f"nothing is acted on: {self.stopped}" + (
                f" ({skipped_reason(self.skipped)})" if self.hooks and not self.closed else "")]
        if self.skipped:
            return [f"the objects of {', '.join(h.name for h in self.skipped)} are not acted on: "
                    f"{skipped_reason(self.skipped)}"]
        return []

    def hooks_for(self, obj: Mapping[str, Any]) -> list[Hook]:
        """The webhooks acted on whose rules cover ``obj``'s kind."""
        group = _group(str(obj.get("apiVersion") or ""))
        resource = RESOURCES.get((group, str(obj.get("kind") or "")))
        if resource is None or self.closed:
            return []
        covering = self._covering.get((group, resource))
        if covering is None:
            covering = self._covering[(group, resource)] = \
                [h for h in self.acting if any(_rule_covers(r, group, resource) for r in h.rules)]
        return list(covering)

    @cached_property
    def _covering(self) -> dict[tuple[str, str], list[Hook]]:
        """(group, resource) -> the webhooks acted on whose rules cover it, found once per kind."""
        return {}

    def admits(self, obj: Mapping[str, Any], namespace_labels: Mapping[str, Mapping[str, str]] | None = None) -> bool:
        """Rules W5, W6: whether the API server would send ``obj`` to the webhook: one webhook without
        ``matchConditions`` whose rules cover its kind, whose ``namespaceSelector`` matches its Namespace's
        labels and whose ``objectSelector`` matches its own labels; never in an excluded namespace, never
        when the scope is closed. A Namespace not in ``namespace_labels`` has the one label the API server
        always sets, its name."""
        return self._selected(obj, namespace_labels, self.hooks_for(obj))

    def selects(self, obj: Mapping[str, Any], namespace_labels: Mapping[str, Mapping[str, str]] | None = None) -> bool:
        """Rule P9: whether a webhook acted on selects ``obj`` by its namespace and its labels, whatever its kind
        (``check --cluster`` counts the objects of kinds no family handles, which no webhook's rules cover)."""
        return not self.closed and self._selected(obj, namespace_labels, self.acting)

    def _selected(self, obj: Mapping[str, Any], namespace_labels: Mapping[str, Mapping[str, str]] | None,
                  hooks: Sequence[Hook]) -> bool:
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace") or "default"
        if ns in self.excluded_namespaces:
            return False
        labels = (namespace_labels or {}).get(ns)
        if labels is None:
            labels = {NAMESPACE_NAME_LABEL: ns}
        own = meta.get("labels") or {}
        return any(_satisfied(h.requirements[0], labels) and _satisfied(h.requirements[1], own) for h in hooks)


def skipped_reason(hooks: Sequence[Hook]) -> str:
    """Why the objects of webhooks with ``matchConditions`` are not acted on (rule W5)."""
    conditions = sorted({c for h in hooks for c in h.match_conditions})
    return (f"matchConditions {', '.join(conditions)} (CEL the API server evaluates per request: who sends it, "
            "a dry run, an authorizer check; no reading of the object decides them)")


def closed_scope(why: str, excluded: frozenset[str] | set[str] = frozenset(), source: str = "") -> Scope:
    """Rule W5: the scope that holds nothing, and says ``why``."""
    return Scope((), frozenset(excluded), source or why, closed=why)


def scope_from_configuration(configuration: Mapping[str, Any], excluded: frozenset[str] | set[str] = frozenset(),
                             source: str = "") -> Scope:
    """Rule W5: the scope of a MutatingWebhookConfiguration (as the API server stores it, or as
    rendered). The namespace of every webhook's service (the release's) is excluded too (rule W6).
    Raises :class:`SelectorError` for a selector the API server would refuse."""
    name = (configuration.get("metadata") or {}).get("name", WEBHOOK_CONFIGURATION)
    hooks, excluded = [], set(excluded)
    for i, hook in enumerate(configuration.get("webhooks") or []):
        if not isinstance(hook, Mapping):
            raise SelectorError(f"MutatingWebhookConfiguration {name}: webhooks[{i}]: must be a mapping")
        label = f"MutatingWebhookConfiguration {name}: {hook.get('name') or f'webhooks[{i}]'}"
        service = (hook.get("clientConfig") or {}).get("service") or {}
        if isinstance(service.get("namespace"), str):
            excluded.add(service["namespace"])
        conditions = hook.get("matchConditions") or []
        if not isinstance(conditions, list):
            raise SelectorError(f"{label}.matchConditions: must be a list")
        names = tuple(str(c.get("name") or f"matchConditions[{j}]") if isinstance(c, Mapping) else f"matchConditions[{j}]"
                      for j, c in enumerate(conditions))
        h = Hook(label, tuple(r for r in hook.get("rules") or [] if isinstance(r, Mapping)),
                 hook.get("namespaceSelector") or {}, hook.get("objectSelector") or {}, names)
        _requirements(h.namespace_selector, f"{label}.namespaceSelector")   # refuse a bad one now, not per object
        _requirements(h.object_selector, f"{label}.objectSelector")
        hooks.append(h)
    return Scope(tuple(hooks), frozenset(excluded), source or f"MutatingWebhookConfiguration {name}")


def scope_fields(configuration: Mapping[str, Any] | None) -> list[Any]:
    """Rule W5: what of a MutatingWebhookConfiguration the scope reads (per webhook: its name, rules,
    selectors, matchConditions and Service namespace), so that a change of anything else (the ``caBundle`` a certificate
    rotation writes, timeouts, failure policies) is known not to change the scope."""
    out: list[Any] = []
    for hook in (configuration or {}).get("webhooks") or []:
        if not isinstance(hook, Mapping):
            out.append(hook)
            continue
        service = (hook.get("clientConfig") or {}).get("service") if isinstance(hook.get("clientConfig"), Mapping) else None
        out.append([hook.get("name"), hook.get("rules"), hook.get("namespaceSelector"), hook.get("objectSelector"),
                    hook.get("matchConditions"), service.get("namespace") if isinstance(service, Mapping) else None])
    return out


def default_configuration(release_namespace: str = INSTALL_NAMESPACE) -> dict[str, Any]:
    """The selectors manifests/base/mutatingwebhookconfiguration.yaml installs (opt-out: every namespace
    but kube-system, kube-node-lease and the release's, and none labelled ``policylib.io/skip=true``;
    no object labelled so), for Deployments, StatefulSets, Volcano Jobs, Kubeflow jobs, JobSets, TrainJobs and
    LeaderWorkerSets: the
    scope a default install makes."""
    skip = {"key": "policylib.io/skip", "operator": "NotIn", "values": ["true"]}
    namespaces = {"matchExpressions": [
        {"key": NAMESPACE_NAME_LABEL, "operator": "NotIn",
         "values": list(dict.fromkeys(["kube-system", "kube-node-lease", release_namespace]))}, skip]}
    rules = [{"apiGroups": [APPS_GROUP], "apiVersions": ["v1"], "resources": ["deployments", "statefulsets"],
              "operations": ["CREATE", "UPDATE"]},
             {"apiGroups": [VOLCANO_BATCH_GROUP], "apiVersions": [VOLCANO_JOB_VERSION], "resources": ["jobs"],
              "operations": ["CREATE", "UPDATE"]},
             {"apiGroups": [KUBEFLOW_GROUP], "apiVersions": [KUBEFLOW_VERSION, MPI_V2_VERSION],
              "resources": ["tfjobs", "pytorchjobs", "mpijobs"], "operations": ["CREATE", "UPDATE"]},
             {"apiGroups": [JOBSET_GROUP], "apiVersions": [JOBSET_VERSION], "resources": ["jobsets"],
              "operations": ["CREATE", "UPDATE"]},
             {"apiGroups": [TRAINER_GROUP], "apiVersions": [TRAINER_VERSION], "resources": ["trainjobs"],
              "operations": ["CREATE", "UPDATE"]},
             {"apiGroups": [LWS_GROUP], "apiVersions": [LWS_VERSION], "resources": ["leaderworkersets"],
              "operations": ["CREATE", "UPDATE"]}]
    return {"metadata": {"name": WEBHOOK_CONFIGURATION},
            "webhooks": [{"name": "default", "rules": rules, "namespaceSelector": namespaces,
                          "objectSelector": {"matchExpressions": [skip]}}]}


def namespace_labels(namespaces: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """Namespace name -> its labels, with the name label the API server sets on every Namespace."""
    out: dict[str, dict[str, str]] = {}
    for ns in namespaces:
        meta = ns.get("metadata") or {}
        name = meta.get("name")
        if isinstance(name, str):
            out[name] = {NAMESPACE_NAME_LABEL: name, **(meta.get("labels") or {})}
    return out

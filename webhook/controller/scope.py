"""What the controller acts on (rules W5, W6): the scope of the installed MutatingWebhookConfiguration, read
from the controller's stores, and the Events that say what it leaves out (rule W10)."""
from __future__ import annotations

import logging
import re
import threading
from typing import Any, Callable

import policylib
from policylib.facts import namespace_of
from policylib.plan import Write
from policylib.scope import NAMESPACE_NAME_LABEL, Scope, closed_scope, scope_from_configuration
from policylib.shell import kube

from ..informer import Store
from .events import EventRecorder
from .overlay import version_of

log = logging.getLogger(__name__)


class ScopeWatch:
    """The scope as the controller's stores show it. The worker, /readyz and the gauges read it from their
    own threads: it is built (and logged) once per version of the configuration. ``pod`` is the controller's
    own Pod, whose Deployment gets the Events about the scope."""

    def __init__(self, stores: dict[kube.Resource, Store], namespace: str, webhook_configuration: str, pod: str,
                 recorder: EventRecorder, acting: Callable[[], bool]):
        self.stores, self.namespace, self.webhook_configuration, self.pod = stores, namespace, webhook_configuration, pod
        self.recorder, self.acting = recorder, acting
        self.configurations = kube.webhook_configuration(webhook_configuration)
        #: The scope as last built, and the webhook configuration's resourceVersion it was built from.
        self._scope: tuple[str | None, Scope] | None = None
        self._lock = threading.Lock()
        #: Rule W5: what the worker last reported of the scope this term (its notes); None: nothing yet.
        self.reported: tuple[str, ...] | None = None

    def scope(self) -> Scope:
        """Rule W5: the scope of the installed webhook configuration; closed (nothing in it) when there is
        none or its selectors are ones the API server would refuse; never the controller's own namespace
        (rule W6). Logged when it changes: a warning when it leaves anything out."""
        with self._lock:
            return self._build_scope()

    def _build_scope(self) -> Scope:
        name = self.webhook_configuration
        configuration = self.stores[self.configurations].get("", name)
        version = version_of(configuration) if configuration else None
        cached = self._scope
        if cached is not None and cached[0] == version:
            return cached[1]
        if configuration is None:
            scope = closed_scope(f"no MutatingWebhookConfiguration {name} is installed", {self.namespace})
        else:
            try:
                scope = scope_from_configuration(configuration, {self.namespace})
            except policylib.PolicylibError as e:   # a selector the API server would refuse: act on nothing
                scope = closed_scope(f"MutatingWebhookConfiguration {name} cannot be read: {e}", {self.namespace})
        notes = scope.notes()
        log.log(logging.WARNING if notes else logging.INFO, "scope",
                extra={"source": scope.source, "excluded": sorted(scope.excluded_namespaces),
                       "acting": not scope.stopped, "notes": notes})
        self._scope = (version, scope)
        return scope

    def report_scope(self) -> None:
        """Rules W5, W10, the worker's step for ``SCOPE_KEY``: when what the scope leaves out changes (and once
        per term when it leaves anything out), one Event on the controller's own Deployment: Warning
        ``ScopeClosed`` naming why, Normal ``ScopeRestored`` when nothing is left out again. The log line
        and the gauges (``policylib_controller_scope_closed``, ``_scope_skipped_webhooks``) say it on every
        replica; /readyz too (``Reconciler.sync_progress``)."""
        notes = tuple(self.scope().notes())
        before, self.reported = self.reported, notes
        if notes == before or (before is None and not notes) or not self.acting():
            return
        own = self.own_deployment()
        if own is None:
            log.info("no Event for the scope: the controller's own Deployment is not known",
                     extra={"pod": self.pod, "namespace": self.namespace})
            return
        meta = own.get("metadata") or {}
        write = Write("Deployment", self.namespace, str(meta.get("name")), list(notes), False, action="none",
                      api_version=kube.DEPLOYMENTS.api_version)
        if notes:
            self.recorder.record(write, own, reason="ScopeClosed", note="; ".join(notes), warning=True)
        else:
            self.recorder.record(write, own, reason="ScopeRestored",
                                 note=f"acting on the objects {self.scope().source} sends to the webhook")

    def own_deployment(self) -> dict[str, Any] | None:
        """The Deployment of the controller's own Pod, from the Deployment store: its Pod is named
        ``<Deployment>-<ReplicaSet hash>-<5 characters>`` (the ReplicaSet and Pod names the Deployment and
        ReplicaSet controllers generate); None when no Deployment of its namespace fits."""
        store = self.stores.get(kube.DEPLOYMENTS)
        if not self.pod or store is None:
            return None
        names = [name for ns, name in store.keys()  # noqa: SIM118 -- Store.keys(), not a dict's
                 if ns == self.namespace and re.fullmatch(re.escape(name) + r"-[a-z0-9]+-[a-z0-9]{5}", self.pod)]
        return store.get(self.namespace, max(names, key=len)) if names else None

    def in_scope(self, obj: dict[str, Any]) -> bool:
        """Rules W5, W6: whether the API server sends ``obj`` to the webhook (its Namespace's labels from
        the Namespace store; one not there has only its name label)."""
        ns = namespace_of(obj)
        namespace = self.stores[kube.NAMESPACES].get("", ns)
        labels = {NAMESPACE_NAME_LABEL: ns, **(((namespace or {}).get("metadata") or {}).get("labels") or {})}
        return self.scope().admits(obj, {ns: labels})

"""A scope for the controller and ``plan``/``check --cluster`` without a webhook: a MutatingWebhookConfiguration
with manifests/base's selectors and rules for a Service nothing serves, failurePolicy Ignore (the API server's
call fails at once and admits unchanged). The scope fails closed (rule W5), so a cluster with no webhook
installed needs one; the end-to-end harness and bench/bench_scale.py both install it."""
from __future__ import annotations

from typing import Any


def unserved_scope_configuration(name: str, webhook_name: str, service_namespace: str) -> dict[str, Any]:
    """The configuration ``name``: every webhook of manifests/base's, named ``webhook_name``, calling the
    Service ``none`` in ``service_namespace`` (a namespace nothing creates) with a one-second timeout."""
    # policylib is loaded when a scope is made, not when the harness or the benchmark imports this module.
    from policylib.scope import default_configuration
    configuration = default_configuration()
    configuration.update(apiVersion="admissionregistration.k8s.io/v1", kind="MutatingWebhookConfiguration",
                         metadata={"name": name})
    for hook in configuration["webhooks"]:
        hook.update(name=webhook_name, admissionReviewVersions=["v1"], sideEffects="None", failurePolicy="Ignore",
                    timeoutSeconds=1, matchPolicy="Equivalent",
                    clientConfig={"service": {"name": "none", "namespace": service_namespace, "path": "/mutate"}})
    return configuration

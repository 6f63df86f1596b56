"""Putting the CA bundle on the webhook configuration: every webhook of the MutatingWebhookConfiguration, by name,
read and updated at its resourceVersion (``certs --patch``)."""
from __future__ import annotations

import copy
from typing import Any

from .certs import CertError


def with_ca_bundle(configuration: dict[str, Any], ca_bundle: str) -> tuple[dict[str, Any], list[str], list[str]]:
    """The configuration with ``ca_bundle`` on every webhook's clientConfig, the names of all its webhooks and
    of those whose caBundle changed. Every entry, by name: never a count or an index of them."""
    body = copy.deepcopy(configuration)
    names, changed = [], []
    for hook in body.get("webhooks") or []:
        names.append(str(hook.get("name")))
        client = hook.setdefault("clientConfig", {})
        if client.get("caBundle") != ca_bundle:
            client["caBundle"] = ca_bundle
            changed.append(str(hook.get("name")))
    return body, names, changed


def patch_configuration(api: Any, name: str, ca_bundle: str, attempts: int = 5) -> tuple[list[str], list[str]]:
    """Put ``ca_bundle`` on every webhook of the MutatingWebhookConfiguration ``name`` (a read and an update
    at its resourceVersion, again on a conflict); returns (every webhook's name, the ones changed)."""
    from policylib.shell import kube
    res = kube.MUTATING_WEBHOOKS
    for attempt in range(attempts):
        try:
            current = api.get(res, None, name)
        except kube.NotFound:
            raise CertError(f"mutatingwebhookconfiguration {name!r} not found: apply the manifests first "
                            "(kubectl apply -k manifests/), then run this again") from None
        except kube.ApiError as e:
            raise CertError(f"cannot read mutatingwebhookconfiguration {name!r}: {e}") from None
        body, names, changed = with_ca_bundle(current, ca_bundle)
        if not names:
            raise CertError(f"mutatingwebhookconfiguration {name!r} has no webhooks to put the caBundle on")
        if not changed:
            return names, []
        try:
            api.update(res, None, name, body)
            return names, changed
        except kube.Conflict:
            if attempt == attempts - 1:
                raise CertError(f"mutatingwebhookconfiguration {name!r} kept changing while the caBundle was being "
                                f"written ({attempts} conflicts): run this again") from None
        except kube.ApiError as e:
            raise CertError(f"cannot write the caBundle of mutatingwebhookconfiguration {name!r}: {e}") from None
    raise AssertionError("unreachable")

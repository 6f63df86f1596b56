"""webhook/protocols.py: what the server needs of its facts and its certificate, declared, not guessed."""
from __future__ import annotations

import policylib
import webhook
from webhook.admission.facts import ObjectOnlyFacts
from webhook.admission.hpacache import HpaCache
from webhook.protocols import FactsSource


class Syncing(policylib.ClusterFacts):
    """A facts source of a library user's: not synced yet."""

    ready = False

    def status(self):
        return {"facts": "mine", "synced": 0}


def readyz(facts):
    response = webhook.create_app(None, facts=facts).test_client().get("/readyz")
    return response.status_code, {k: v for k, v in response.get_json().items() if k in ("ready", "facts", "synced")}


def test_the_sources_of_webhook_cache_are_facts_sources_and_plain_facts_are_not():
    assert isinstance(ObjectOnlyFacts("off"), FactsSource)
    assert all(hasattr(HpaCache, member) for member in ("ready", "status"))
    assert not isinstance(policylib.ClusterFacts(), FactsSource)


def test_readyz_asks_a_facts_source_and_takes_plain_facts_as_given():
    assert readyz(policylib.ClusterFacts()) == (200, {"ready": True, "facts": "given"})
    assert readyz(Syncing()) == (503, {"ready": False, "facts": "mine", "synced": 0})
    assert readyz(None) == (200, {"ready": True, "facts": "object-only"})

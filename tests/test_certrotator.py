"""The certificate rotator (webhook/controller/certplan.py, certrotator.py): the pure plan, step by step, and the shell driven
against an in-memory API with a fake clock through renewals and a CA rotation."""
from __future__ import annotations

import base64
import copy
import datetime as dt

import pytest
from cryptography import x509

from policylib.shell import kube
from webhook.controller import certplan as cp
from webhook.controller import certrotator as cr

S = cp.Settings(ca_seconds=900, serving_seconds=300, propagation_seconds=20)
NAMES = S.dns_names


def cert(fp: str, not_after: float, is_ca: bool = False, issuer: str | None = None, sans=NAMES) -> cp.Cert:
    return cp.Cert(fp, not_after, is_ca, issuer, tuple(sans) if not is_ca else ())


CA = cert("ca1", 1900, is_ca=True)
CA2 = cert("ca2", 2800, is_ca=True)
SERVING = cert("s1", 1400, issuer="ca1")
STEADY = cp.State(ca=CA, trusted_since=1000, serving=SERVING, issued_at=1100, bundle=("ca1",))


def step(state: cp.State, now: float = 1200) -> tuple:
    s = cp.plan(state, S, now)
    return s.action, s.reason, s.wake_at


def test_fresh_install_creates_ca_then_bundle_then_serving():
    assert step(cp.State(bundle=())) == ("create-ca", "no CA Secret", None)
    assert step(cp.State(ca=CA, bundle=())) == ("write-bundle", "the caBundle differs from the CAs to trust", None)
    assert step(cp.State(ca=CA, bundle=("ca1",))) == ("mark-trusted", "the caBundle trusts the current CA", None)
    # Nothing serves yet: the serving certificate is issued at once.
    assert step(cp.State(ca=CA, trusted_since=1200, bundle=("ca1",))) == ("issue-serving", "no serving certificate", None)


def test_steady_state_waits_until_the_earliest_renewal():
    # serving renews at 1400 - 300/3 = 1300; the CA at 1900 - 900/3 = 1600
    assert step(STEADY) == ("wait", "certificates are valid", 1300)


def test_serving_renewal_from_the_same_ca_needs_no_bundle_change():
    assert step(STEADY, now=1300) == ("issue-serving", "less than a third of the serving certificate's lifetime is left",
                                      None)


@pytest.mark.parametrize("serving, why", [
    (cert("s1", 1400, issuer=None), "the serving certificate was not issued by the current CA"),
    (cert("s1", 1400, issuer="ca1", sans=("x",)), "the serving certificate's SANs are not the Service's names"),
    (cert("s1", 1100, issuer="ca1"), "the serving certificate has expired"),
    (cert("s1", 1950, issuer="ca1"), "the serving certificate outlives its CA"),
])
def test_unusable_serving_certificate_is_reissued(serving, why):
    state = cp.State(ca=CA, trusted_since=1000, serving=serving, bundle=("ca1",))
    assert step(state, now=1200)[:2] == ("issue-serving", why)


def test_ca_problems():
    assert step(cp.State(ca=cert("ca1", 1100, is_ca=True), bundle=("ca1",))) == ("create-ca", "the CA has expired", None)
    assert step(cp.State(ca=cert("ca1", 1900), bundle=("ca1",))) == ("create-ca", "ca.crt is not a CA", None)
    assert step(cp.State(bundle=("ca1",), why_no_ca="the CA Secret holds no readable ca.crt and ca.key"))[:2] == \
        ("create-ca", "the CA Secret holds no readable ca.crt and ca.key")


def test_missing_webhook_configuration_waits():
    assert step(cp.State(ca=CA)) == ("wait", "webhook configuration policylib-webhook not found", 1205)


def test_ca_rotation_sequence_never_leaves_the_serving_certificate_untrusted():
    # 1. a third of the CA's lifetime left, serving renewed recently: rotate
    at_1600 = cp.State(ca=CA, trusted_since=1000, serving=cert("s2", 1900, issuer="ca1"), issued_at=1600,
                       bundle=("ca1",))
    assert step(at_1600, 1600)[0] == "rotate-ca"
    # 2. the new CA is added next to the old one (new first)
    rotated = cp.State(ca=CA2, previous_ca=CA, serving=cert("s2", 1900, issuer="ca1"), issued_at=1600,
                       bundle=("ca1",))
    assert step(rotated, 1601)[0] == "write-bundle"
    assert cp.desired_bundle(rotated, 1601) == ("ca2", "ca1")
    both = cp.State(**{**rotated.__dict__, "bundle": ("ca2", "ca1")})
    assert step(both, 1602)[0] == "mark-trusted"
    # 3. the serving certificate (from the old CA) is kept until the API server has seen the new bundle
    trusted = cp.State(**{**both.__dict__, "trusted_since": 1602})
    assert step(trusted, 1610) == ("wait", "the serving certificate was not issued by the current CA; waiting until "
                                           "the API server has seen the new CA in the caBundle", 1622)
    assert step(trusted, 1622)[0] == "issue-serving"
    # 4. the old CA stays until every replica serves the new certificate, then leaves
    reissued = cp.State(**{**trusted.__dict__, "serving": cert("s3", 1922, issuer="ca2"), "issued_at": 1622})
    assert step(reissued, 1630) == ("wait", "the previous CA stays trusted until every replica serves the new "
                                            "certificate", 1642)
    assert step(reissued, 1642)[0] == "drop-previous"
    dropped = cp.State(**{**reissued.__dict__, "previous_ca": None})
    assert step(dropped, 1643)[0] == "write-bundle"
    assert cp.desired_bundle(dropped, 1643) == ("ca2",)


def test_an_expired_previous_ca_leaves_the_bundle():
    state = cp.State(ca=CA2, previous_ca=cert("ca1", 1100, is_ca=True), trusted_since=1000,
                     serving=cert("s3", 1500, issuer="ca2"), issued_at=1150, bundle=("ca2", "ca1"))
    assert step(state, 1200)[0] == "write-bundle"
    assert cp.desired_bundle(state, 1200) == ("ca2",)


@pytest.mark.parametrize("text, seconds", [("90s", 90), ("10m", 600), ("8760h", 31536000), ("365d", 31536000)])
def test_parse_duration(text, seconds):
    assert cp.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "10", "1.5h", "0s", "-1h", "1w"])
def test_parse_duration_refuses(text):
    with pytest.raises(ValueError, match=f"invalid duration {text!r}"):
        cp.parse_duration(text)


def test_settings_problems():
    assert cp.Settings(ca_seconds=600, serving_seconds=300, propagation_seconds=10).problems() == [
        "certificates: the CA lifetime (600s) must be at least three serving lifetimes (900s): a CA is renewed "
        "when a third of its lifetime is left, and must still outlive every serving certificate it signed"]
    assert cp.Settings(ca_seconds=900, serving_seconds=300, propagation_seconds=101).problems() == [
        "certificates: the propagation delay (101s) must be at most a third of the serving lifetime (300s)"]
    assert cp.Settings().problems() == []


# --- the shell, against an in-memory API -----------------------------------------------------------

class MemoryApi:
    """get/create/update/request on a dict, with resourceVersion conflicts as the API server does."""

    def __init__(self):
        self.objects: dict[tuple, dict] = {}
        self.version = 0
        self.writes: list[tuple] = []

    def _key(self, res, namespace, name):
        return (res.plural, namespace, name)

    def get(self, res, namespace, name):
        obj = self.objects.get(self._key(res, namespace, name))
        if obj is None:
            raise kube.NotFound(404, f"{res.plural} {name} not found")
        return copy.deepcopy(obj)

    def _store(self, res, namespace, obj):
        self.version += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.objects[self._key(res, namespace, obj["metadata"]["name"])] = obj
        return copy.deepcopy(obj)

    def create(self, res, namespace, obj):
        if self._key(res, namespace, obj["metadata"]["name"]) in self.objects:
            raise kube.Conflict(409, "exists")
        self.writes.append(("create", res.plural, obj["metadata"]["name"]))
        return self._store(res, namespace, obj)

    def update(self, res, namespace, name, obj):
        current = self.objects[self._key(res, namespace, name)]
        if obj["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise kube.Conflict(409, "the object has been modified")
        self.writes.append(("update", res.plural, name))
        return self._store(res, namespace, obj)


def webhook_configuration() -> dict:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "policylib-webhook"},
            "webhooks": [{"name": n, "clientConfig": {"service": {"name": "policylib-webhook"}}}
                         for n in ("deployments.policylib.io", "volcano-jobs.policylib.io")]}


def served_and_trusted(api: MemoryApi) -> bool:
    """The serving certificate in the Secret chains to a CA in every webhook's caBundle."""
    tls = api.get(cr.SECRETS, "policylib-system", "policylib-webhook-tls")
    serving = x509.load_pem_x509_certificate(base64.b64decode(tls["data"]["tls.crt"]))
    config = api.get(cr.MUTATING_WEBHOOKS, None, "policylib-webhook")
    for hook in config["webhooks"]:
        cas = x509.load_pem_x509_certificates(base64.b64decode(hook["clientConfig"]["caBundle"]))
        if not any(cp._signed_by(serving, ca) for ca in cas):
            return False
    return True


def test_rotator_through_renewals_and_a_ca_rotation():
    """A simulated hour with a 15 minute CA and 5 minute serving certificates, a round every 5 s: the
    serving certificate always chains to the bundle, and the steps are exactly the expected ones."""
    api = MemoryApi()
    api._store(cr.MUTATING_WEBHOOKS, None, webhook_configuration())
    start = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc).timestamp()
    clock = [start]
    rotator = cr.Rotator(api, S, registry=None, clock=lambda: clock[0])
    made: list[str] = []
    original = rotator.make

    def record(step, *args):
        made.append(step.action)
        original(step, *args)

    rotator.make = record  # type: ignore[method-assign]
    rotator.reconcile_steps()
    assert made == ["create-ca", "write-bundle", "mark-trusted", "issue-serving"]
    made.clear()
    while clock[0] < start + 3650:   # the 6th rotation starts at +3600 and ends 40 s later
        clock[0] += 5
        rotator.reconcile_steps()
        assert served_and_trusted(api), f"untrusted serving certificate at +{clock[0] - start:.0f}s"
    rotations = made.count("rotate-ca")
    # A CA lives 900 s and is renewed with 300 s left: every 600 s, 6 in the hour.
    assert rotations == 6
    # Each rotation: bundle with both, mark, issue, drop, bundle with the new one only.
    assert made.count("drop-previous") == 6
    assert made.count("write-bundle") == 12
    assert made.count("mark-trusted") == 6
    assert "create-ca" not in made
    # 6 reissues after a rotation and 13 renewals at two thirds of a 300 s lifetime (none due at +3650)
    assert made.count("issue-serving") == 19
    tls = api.get(cr.SECRETS, "policylib-system", "policylib-webhook-tls")
    assert tls["type"] == "kubernetes.io/tls"
    assert sorted(tls["data"]) == ["ca.crt", "tls.crt", "tls.key"]
    assert rotator.not_after.labels("serving")._value.get() > clock[0]


def test_rotator_keeps_a_valid_setup_untouched():
    api = MemoryApi()
    api._store(cr.MUTATING_WEBHOOKS, None, webhook_configuration())
    now = [dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc).timestamp()]
    rotator = cr.Rotator(api, S, clock=lambda: now[0])
    rotator.reconcile_steps()
    writes = len(api.writes)
    now[0] += 10
    assert rotator.reconcile_steps().action == "wait"
    assert len(api.writes) == writes


def test_rotator_replaces_an_unreadable_ca_secret():
    api = MemoryApi()
    api._store(cr.MUTATING_WEBHOOKS, None, webhook_configuration())
    api._store(cr.SECRETS, "policylib-system", {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                                                "metadata": {"name": "policylib-webhook-ca"},
                                                "data": {"ca.crt": base64.b64encode(b"junk").decode()}})
    state = cp.observe(api.get(cr.SECRETS, "policylib-system", "policylib-webhook-ca"), None, None)
    assert (state.ca, state.why_no_ca) == (None, "the CA Secret holds no readable ca.crt and ca.key")
    rotator = cr.Rotator(api, S)
    assert rotator.reconcile_steps().action == "wait"
    assert served_and_trusted(api)


@pytest.mark.parametrize("args, message", [
    (["--certificates-serving-duration", "10"], "invalid duration '10'"),
    (["--certificates-ca-duration", "100h", "--certificates-serving-duration", "50h"],
     "the CA lifetime (360000s) must be at least three serving lifetimes (540000s)"),
])
def test_controller_refuses_bad_certificate_flags(args, message, capsys):
    from webhook.__main__ import main
    assert main(["controller", "--certificates", "self", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("webhook: error: ") and message in err, err


def test_rotator_with_a_63_character_namespace():
    """NAME.NS.svc is longer than a Common Name may be (64): the SANs carry the names, the CN is cut."""
    api = MemoryApi()
    api._store(cr.MUTATING_WEBHOOKS, None, webhook_configuration())
    settings = cp.Settings(namespace="n" * 63)
    assert cr.Rotator(api, settings).reconcile_steps().action == "wait"
    tls = api.get(cr.SECRETS, "n" * 63, "policylib-webhook-tls")
    serving = x509.load_pem_x509_certificate(base64.b64decode(tls["data"]["tls.crt"]))
    assert cp._sans(serving) == settings.dns_names
    assert len(serving.subject.rfc4514_string()) == len("CN=") + 64

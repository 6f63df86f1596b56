"""webhook.certs, certmake, certcheck, cabundle and ``python -m webhook certs``: what the API server's Go TLS client checks."""
from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import subprocess
import sys
import warnings

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa, x448, x25519
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.helpers import REPO
from webhook.certcheck import key_problem
from webhook.certs import CertError, ensure_certs, write_pair

SERVICE, NAMESPACE = "policylib-webhook", "policylib-system"
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def load(path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def ext(cert: x509.Certificate, cls):
    return cert.extensions.get_extension_for_class(cls)


@pytest.fixture
def certs(tmp_path):
    state = ensure_certs(tmp_path, SERVICE, NAMESPACE, now=NOW)
    return tmp_path, state


def test_writes_the_four_files_of_a_tls_secret_with_private_keys_0600(certs):
    directory, _ = certs
    assert sorted(p.name for p in directory.iterdir()) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    assert (directory / "tls.key").stat().st_mode & 0o777 == 0o600
    assert (directory / "ca.key").stat().st_mode & 0o777 == 0o600


SERVICE_NAMES = ["policylib-webhook", "policylib-webhook.policylib-system", "policylib-webhook.policylib-system.svc",
                 "policylib-webhook.policylib-system.svc.cluster.local"]


def sans(path) -> tuple[list, list]:
    san = ext(load(path), x509.SubjectAlternativeName).value
    return san.get_values_for_type(x509.DNSName), san.get_values_for_type(x509.IPAddress)


def test_serving_certificate_has_the_service_names_only_as_sans(certs):
    assert sans(certs[0] / "tls.crt") == (SERVICE_NAMES, [])
    assert certs[1].sans == tuple(SERVICE_NAMES)


def test_local_adds_localhost_and_loopback_to_the_sans(tmp_path):
    state = ensure_certs(tmp_path, SERVICE, NAMESPACE, now=NOW, local=True)
    assert sans(tmp_path / "tls.crt") == (SERVICE_NAMES + ["localhost"], [ipaddress.ip_address("127.0.0.1")])
    assert state.sans == (*SERVICE_NAMES, "localhost", "127.0.0.1")
    assert ensure_certs(tmp_path, SERVICE, NAMESPACE, now=NOW, local=True).new_serving is False


@pytest.mark.parametrize("first, then, reason", [
    (True, False, "the serving certificate's SANs differ from those asked for, the Service's names only "
                  "(no --local): it has localhost, 127.0.0.1"),
    (False, True, "the serving certificate's SANs differ from those asked for, the Service's names and loopback "
                  "(--local): it lacks localhost, 127.0.0.1"),
])
def test_a_serving_certificate_whose_sans_differ_from_the_flags_is_renewed_from_the_same_ca(tmp_path, first, then,
                                                                                          reason):
    ensure_certs(tmp_path, SERVICE, NAMESPACE, now=NOW, local=first)
    ca_before = (tmp_path / "ca.crt").read_bytes()
    state = ensure_certs(tmp_path, SERVICE, NAMESPACE, now=NOW, local=then)
    assert (state.new_ca, state.new_serving, state.replaced_ca, state.reason) == (False, True, False, reason)
    assert (tmp_path / "ca.crt").read_bytes() == ca_before
    expected = (SERVICE_NAMES + ["localhost"], [ipaddress.ip_address("127.0.0.1")]) if then else (SERVICE_NAMES, [])
    assert sans(tmp_path / "tls.crt") == expected
    load(tmp_path / "tls.crt").verify_directly_issued_by(load(tmp_path / "ca.crt"))
    assert ensure_certs(tmp_path, SERVICE, NAMESPACE, now=NOW, local=then).new_serving is False


def test_renew_keeps_the_sans_the_flags_ask_for(tmp_path):
    ensure_certs(tmp_path, SERVICE, NAMESPACE, now=NOW, local=True)
    ensure_certs(tmp_path, SERVICE, NAMESPACE, now=NOW, local=True, renew=True)
    assert "localhost" in sans(tmp_path / "tls.crt")[0]
    state = ensure_certs(tmp_path, SERVICE, NAMESPACE, now=NOW, renew=True)
    assert state.reason == "renewal requested" and sans(tmp_path / "tls.crt") == (SERVICE_NAMES, [])


def test_serving_certificate_is_a_p256_server_leaf_signed_by_the_ca(certs):
    directory, _ = certs
    ca, cert = load(directory / "ca.crt"), load(directory / "tls.crt")
    assert ext(cert, x509.ExtendedKeyUsage).value == x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH])
    assert ext(cert, x509.BasicConstraints).value.ca is False
    assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey)
    assert cert.public_key().curve.name == "secp256r1"
    cert.verify_directly_issued_by(ca)
    assert cert.not_valid_after_utc - NOW == dt.timedelta(days=365)


def test_ca_has_basic_constraints_ca_true_and_signs_certificates_only(certs):
    ca = load(certs[0] / "ca.crt")
    constraints = ext(ca, x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca is True
    usage = ext(ca, x509.KeyUsage).value
    assert usage.key_cert_sign and usage.crl_sign and not usage.digital_signature


def test_ca_bundle_is_base64_of_the_ca_pem(certs):
    directory, state = certs
    assert base64.b64decode(state.ca_bundle) == (directory / "ca.crt").read_bytes()


def test_run_again_keeps_a_valid_ca_and_serving_certificate(certs):
    directory, _ = certs
    before = {name: (directory / name).read_bytes() for name in ("ca.crt", "ca.key", "tls.crt", "tls.key")}
    state = ensure_certs(directory, SERVICE, NAMESPACE, now=NOW + dt.timedelta(days=200))
    assert (state.new_ca, state.new_serving) == (False, False)
    assert {name: (directory / name).read_bytes() for name in before} == before


def test_renews_the_serving_certificate_when_less_than_a_third_of_its_life_is_left(certs):
    directory, _ = certs
    ca_before = (directory / "ca.crt").read_bytes()
    old = load(directory / "tls.crt")
    third_left = old.not_valid_after_utc - (old.not_valid_after_utc - old.not_valid_before_utc) / 3
    kept = ensure_certs(directory, SERVICE, NAMESPACE, now=third_left - dt.timedelta(minutes=1))
    assert kept.new_serving is False
    renewed = ensure_certs(directory, SERVICE, NAMESPACE, now=third_left + dt.timedelta(minutes=1))
    assert (renewed.new_ca, renewed.new_serving) == (False, True)
    assert renewed.reason.startswith("less than a third of the serving certificate's lifetime is left")
    assert (directory / "ca.crt").read_bytes() == ca_before
    assert load(directory / "tls.crt").serial_number != old.serial_number
    load(directory / "tls.crt").verify_directly_issued_by(load(directory / "ca.crt"))


def test_another_service_name_gets_a_new_serving_certificate(certs):
    state = ensure_certs(certs[0], "other", NAMESPACE, now=NOW)
    assert (state.new_ca, state.new_serving) == (False, True)
    assert "other.policylib-system.svc" in ext(load(certs[0] / "tls.crt"), x509.SubjectAlternativeName) \
        .value.get_values_for_type(x509.DNSName)


def test_a_serving_certificate_from_another_ca_is_replaced(certs, tmp_path_factory):
    directory, _ = certs
    other = tmp_path_factory.mktemp("other")
    ensure_certs(other, SERVICE, NAMESPACE, now=NOW)
    (directory / "tls.crt").write_bytes((other / "tls.crt").read_bytes())
    (directory / "tls.key").write_bytes((other / "tls.key").read_bytes())
    state = ensure_certs(directory, SERVICE, NAMESPACE, now=NOW)
    assert state.new_serving and state.reason == "the serving certificate's signature does not verify against ca.crt"
    load(directory / "tls.crt").verify_directly_issued_by(load(directory / "ca.crt"))


def test_a_ca_expiring_before_the_next_serving_certificate_is_replaced(certs):
    directory, _ = certs
    ca = load(directory / "ca.crt")
    now = ca.not_valid_after_utc - dt.timedelta(days=100)
    state = ensure_certs(directory, SERVICE, NAMESPACE, now=now)
    assert (state.new_ca, state.new_serving, state.replaced_ca) == (True, True, True)
    assert state.reason == (f"the CA expires {ca.not_valid_after_utc:%Y-%m-%d}, before a serving certificate valid "
                            f"for 365 days would ({now + dt.timedelta(days=365):%Y-%m-%d}), and a serving "
                            "certificate cannot outlive the CA that signs it")
    assert load(directory / "ca.crt").serial_number != ca.serial_number


def test_an_expired_ca_is_replaced_and_says_so(certs):
    directory, _ = certs
    ca = load(directory / "ca.crt")
    state = ensure_certs(directory, SERVICE, NAMESPACE, now=ca.not_valid_after_utc + dt.timedelta(days=1))
    assert (state.new_ca, state.replaced_ca) == (True, True)
    assert state.reason == f"the CA expired {ca.not_valid_after_utc:%Y-%m-%d}"


def test_days_past_the_ca_make_a_new_ca_that_outlives_three_serving_certificates(certs):
    directory, _ = certs
    old_ca = load(directory / "ca.crt")
    assert old_ca.not_valid_after_utc - NOW == dt.timedelta(days=3650)
    state = ensure_certs(directory, SERVICE, NAMESPACE, days=4000, now=NOW)
    assert (state.new_ca, state.new_serving, state.replaced_ca) == (True, True, True)
    assert state.reason.startswith("the CA expires 2035-12-30, before a serving certificate valid for 4000 days "
                                   "would (2036-12-14)")
    ca, cert = load(directory / "ca.crt"), load(directory / "tls.crt")
    assert ca.not_valid_after_utc - NOW == dt.timedelta(days=12000) == state.ca_not_after - NOW
    assert cert.not_valid_after_utc - NOW == dt.timedelta(days=4000)
    cert.verify_directly_issued_by(ca)
    # kept afterwards: the new CA outlives the next serving certificate of 4000 days too
    assert ensure_certs(directory, SERVICE, NAMESPACE, days=4000, now=NOW).new_ca is False


def test_days_within_the_ca_keep_it(certs):
    state = ensure_certs(certs[0], SERVICE, NAMESPACE, days=3000, now=NOW)
    assert (state.new_ca, state.new_serving, state.replaced_ca) == (False, False, False)


def test_a_fresh_directory_with_long_days_gets_a_ca_for_three_times_as_long_and_no_replacement_note(tmp_path):
    state = ensure_certs(tmp_path, SERVICE, NAMESPACE, days=2000, now=NOW)
    assert (state.new_ca, state.replaced_ca) == (True, False)
    assert load(tmp_path / "ca.crt").not_valid_after_utc - NOW == dt.timedelta(days=6000)


def test_days_whose_ca_would_end_after_9999_is_a_clear_error(tmp_path):
    from webhook.certs import max_days
    longest = max_days(NOW)
    with pytest.raises(CertError, match=rf"^--days {longest + 1} is too long: .*9999-12-31.*; at most {longest}$"):
        ensure_certs(tmp_path, SERVICE, NAMESPACE, days=longest + 1, now=NOW)
    assert list(tmp_path.iterdir()) == []
    state = ensure_certs(tmp_path, SERVICE, NAMESPACE, days=longest, now=NOW)
    assert state.ca_not_after.year == 9999


def test_a_key_that_does_not_match_its_certificate_is_replaced(certs):
    directory, _ = certs
    (directory / "tls.key").write_bytes((directory / "ca.key").read_bytes())
    state = ensure_certs(directory, SERVICE, NAMESPACE, now=NOW)
    assert state.new_serving and state.reason == "no readable serving certificate and matching key"


def test_renew_forces_a_new_serving_certificate_from_the_same_ca(certs):
    directory, _ = certs
    old = load(directory / "tls.crt")
    state = ensure_certs(directory, SERVICE, NAMESPACE, renew=True, now=NOW)
    assert (state.new_ca, state.new_serving, state.reason) == (False, True, "renewal requested")
    assert load(directory / "tls.crt").serial_number != old.serial_number


def test_days_below_one_is_a_clear_error(tmp_path):
    with pytest.raises(CertError, match="--days must be at least 1, got 0"):
        ensure_certs(tmp_path, SERVICE, NAMESPACE, days=0)


def test_cli_prints_only_the_ca_bundle_on_stdout_and_status_on_stderr(tmp_path):
    out = tmp_path / "certs"
    run = subprocess.run([sys.executable, "-m", "webhook", "certs", "--service", SERVICE, "--namespace", NAMESPACE,
                          "--out", str(out), "--days", "30"], cwd=REPO, capture_output=True, text=True, check=True)
    assert base64.b64decode(run.stdout.strip()) == (out / "ca.crt").read_bytes()
    assert "new CA and serving certificate" in run.stderr
    cert = load(out / "tls.crt")
    assert cert.not_valid_after_utc - cert.not_valid_before_utc == dt.timedelta(days=30, minutes=5)
    again = subprocess.run([sys.executable, "-m", "webhook", "certs", "--out", str(out), "--days", "30"],
                           cwd=REPO, capture_output=True, text=True, check=True)
    assert again.stdout == run.stdout
    assert "kept both certificates" in again.stderr


def certs_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "webhook", "certs", *args], cwd=REPO, capture_output=True,
                          text=True)


def test_cli_issues_service_names_only_and_local_adds_loopback(tmp_path):
    run = certs_cli("--out", str(tmp_path))
    assert run.returncode == 0, run.stderr
    assert sans(tmp_path / "tls.crt") == (SERVICE_NAMES, [])
    assert f"serving certificate for {', '.join(SERVICE_NAMES)} valid until" in run.stderr
    local = certs_cli("--out", str(tmp_path), "--local")
    assert local.returncode == 0, local.stderr
    assert local.stdout == run.stdout  # same CA: the caBundle does not change
    assert "new serving certificate (the serving certificate's SANs differ from those asked for" in local.stderr
    assert sans(tmp_path / "tls.crt") == (SERVICE_NAMES + ["localhost"], [ipaddress.ip_address("127.0.0.1")])


def test_cli_days_past_the_ca_says_the_ca_and_the_ca_bundle_change_and_why(tmp_path):
    first = certs_cli("--out", str(tmp_path))
    old_ca = load(tmp_path / "ca.crt")
    run = certs_cli("--out", str(tmp_path), "--days", "4000")
    assert run.returncode == 0, run.stderr
    assert run.stdout != first.stdout
    assert base64.b64decode(run.stdout.strip()) == (tmp_path / "ca.crt").read_bytes()
    note, status = run.stderr.splitlines()
    assert note.startswith(f"{tmp_path}: the CA changes, and so does the caBundle: the CA expires "
                           f"{old_ca.not_valid_after_utc:%Y-%m-%d}, before a serving certificate valid for 4000 days "
                           "would (")
    assert "a serving certificate cannot outlive the CA that signs it. The new CA is valid until " in note
    assert note.endswith("put the new caBundle (below) wherever the old one is (the MutatingWebhookConfiguration) "
                         "before serving the new certificate.")
    assert status.startswith(f"{tmp_path}: new CA and serving certificate (the CA expires ")
    assert "Traceback" not in run.stderr


def test_cli_days_that_fit_in_the_ca_say_nothing_about_it(tmp_path):
    certs_cli("--out", str(tmp_path))
    run = certs_cli("--out", str(tmp_path), "--days", "3000", "--renew")
    assert run.returncode == 0 and "caBundle:" in run.stderr and "the CA changes" not in run.stderr


def test_cli_error_is_one_line_and_exit_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    run = subprocess.run([sys.executable, "-m", "webhook", "certs", "--out", str(blocker / "sub")],
                         cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr.startswith("webhook: error: cannot create ") and run.stderr.count("\n") == 1


# --- keys of other types ------------------------------------------------------------------

def self_signed_ca(key, days: int = 3650) -> x509.Certificate:
    """A CA certificate for ``key`` of any type (EdDSA signs without a separate hash)."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{SERVICE}-ca")])
    algorithm = None if isinstance(key, (ed25519.Ed25519PrivateKey, ed448.Ed448PrivateKey)) else hashes.SHA256()
    return (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(NOW - dt.timedelta(days=1))
            .not_valid_after(NOW + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(key, algorithm))


def write_ca(directory, key) -> None:
    write_pair(directory, "ca.crt", "ca.key", self_signed_ca(key), key)


@pytest.mark.parametrize("key, described", [
    (ed25519.Ed25519PrivateKey.generate(), "an Ed25519 key"),
    (ed448.Ed448PrivateKey.generate(), "an Ed448 key"),
    (ec.generate_private_key(ec.SECP256K1()), "an ECDSA secp256k1 key"),
    (rsa.generate_private_key(65537, 1024), "a 1024-bit RSA key"),
])
def test_a_ca_key_of_a_type_the_webhook_does_not_use_is_replaced_with_a_clear_reason(tmp_path, key, described):
    write_ca(tmp_path, key)
    state = ensure_certs(tmp_path, SERVICE, NAMESPACE, now=NOW)
    assert (state.new_ca, state.new_serving) == (True, True)
    assert state.reason == (f"ca.key holds {described}, which the webhook does not use "
                            "(ECDSA P-256, P-384, P-521 or RSA >= 2048)")
    assert isinstance(load(tmp_path / "ca.crt").public_key(), ec.EllipticCurvePublicKey)
    load(tmp_path / "tls.crt").verify_directly_issued_by(load(tmp_path / "ca.crt"))


def dsa_key():
    """A DSA key, made where the test runs: its module is named only here (deprecated in cryptography 51)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from cryptography.hazmat.primitives.asymmetric import dsa
        return dsa.generate_private_key(2048)


@pytest.mark.parametrize("make, described", [
    (dsa_key, "a DSA key"),
    (x25519.X25519PrivateKey.generate, "an X25519 key"),
    (x448.X448PrivateKey.generate, "an X448 key"),
    (ed448.Ed448PrivateKey.generate, "an Ed448 key"),
])
def test_a_key_that_cannot_sign_a_certificate_is_named_by_its_algorithm(make, described):
    assert key_problem(make(), "tls.key") == (f"tls.key holds {described}, which the webhook does not use "
                                              "(ECDSA P-256, P-384, P-521 or RSA >= 2048)")


def test_an_ed25519_key_in_tls_key_is_replaced(certs):
    directory, _ = certs
    ca = load(directory / "ca.crt")
    (directory / "tls.key").write_bytes(ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    state = ensure_certs(directory, SERVICE, NAMESPACE, now=NOW)
    assert (state.new_ca, state.new_serving) == (False, True)
    assert state.reason == ("tls.key holds an Ed25519 key, which the webhook does not use "
                            "(ECDSA P-256, P-384, P-521 or RSA >= 2048)")
    assert load(directory / "ca.crt") == ca
    load(directory / "tls.crt").verify_directly_issued_by(ca)


def test_an_rsa_ca_and_its_key_are_recognised_as_a_pair_and_kept(tmp_path):
    key = rsa.generate_private_key(65537, 2048)
    write_ca(tmp_path, key)
    ca_before = (tmp_path / "ca.crt").read_bytes()
    state = ensure_certs(tmp_path, SERVICE, NAMESPACE, now=NOW)
    assert (state.new_ca, state.new_serving) == (False, True)
    assert (tmp_path / "ca.crt").read_bytes() == ca_before
    load(tmp_path / "tls.crt").verify_directly_issued_by(load(tmp_path / "ca.crt"))
    assert ensure_certs(tmp_path, SERVICE, NAMESPACE, now=NOW).new_serving is False


def test_cli_with_an_ed25519_ca_key_makes_a_new_ca_and_says_why(tmp_path):
    write_ca(tmp_path, ed25519.Ed25519PrivateKey.generate())
    run = subprocess.run([sys.executable, "-m", "webhook", "certs", "--out", str(tmp_path)],
                         cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    note, status = run.stderr.splitlines()
    assert note.startswith(f"{tmp_path}: the CA changes, and so does the caBundle: ca.key holds an Ed25519 key, ")
    assert status.startswith(f"{tmp_path}: new CA and serving certificate (ca.key holds an Ed25519 key, "
                             "which the webhook does not use (ECDSA P-256, P-384, P-521 or RSA >= 2048));")
    assert "Traceback" not in run.stderr


# --- serve without certificates -------------------------------------------------------------

def serve_cli(cert_dir, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "webhook", "serve", "--cert-dir", str(cert_dir), "--port", "1",
                           "--facts", "none", *args], cwd=REPO, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("present, why", [
    ((), "has no tls.crt and no tls.key"),
    (("tls.crt",), "has no tls.key"),
    (("tls.key",), "has no tls.crt"),
])
def test_serve_says_which_certificate_files_are_missing_and_how_to_make_them(tmp_path, present, why):
    for name in present:
        (tmp_path / name).write_text("")
    run = serve_cli(tmp_path)
    assert run.returncode == 2
    assert run.stderr == (f"webhook: error: cannot load {tmp_path}/tls.crt and {tmp_path}/tls.key: {tmp_path} {why}; "
                          f"make them with: python -m webhook certs --out {tmp_path}\n")


def test_serve_on_loopback_without_a_certificate_directory_suggests_local_certificates(tmp_path):
    missing = tmp_path / "no such dir"
    run = serve_cli(missing, "--host", "127.0.0.1")
    assert run.returncode == 2
    assert run.stderr == (f"webhook: error: cannot load {missing}/tls.crt and {missing}/tls.key: {missing} does not "
                          f"exist; make them with: python -m webhook certs --out '{missing}' --local\n")
    assert not missing.exists()


def test_serve_with_a_file_for_a_certificate_directory_says_so(tmp_path):
    from webhook.admission.certificate import missing_certificates
    (tmp_path / "file").write_text("")
    assert missing_certificates(tmp_path / "file").startswith(
        f"cannot load {tmp_path}/file/tls.crt and {tmp_path}/file/tls.key: {tmp_path}/file is not a directory;")
    ensure_certs(tmp_path, SERVICE, NAMESPACE)
    assert missing_certificates(tmp_path) is None


# --- what run-local says about its certificates ------------------------------------------------------

def run_local_line(directory, **kwargs) -> str:
    from policylib.constants import INSTALL_NAMESPACE, WEBHOOK_SERVICE
    from webhook.__main__ import run_local_certs_line
    return run_local_certs_line(str(directory), ensure_certs(directory, WEBHOOK_SERVICE, INSTALL_NAMESPACE, local=True,
                                                             **kwargs))


def test_run_local_on_a_fresh_directory_says_it_created_certificates_in_a_friendly_way(tmp_path):
    line = run_local_line(tmp_path / "certs")
    assert line.startswith(f"Created a local CA and a serving certificate for localhost and 127.0.0.1 in "
                           f"{tmp_path}/certs/ (valid until ")
    assert line.endswith(f"curl trusts them through {tmp_path}/certs/ca.crt.")
    assert "no readable" not in line
    assert run_local_line(tmp_path / "certs").startswith(f"Using the certificates in {tmp_path}/certs/ (valid until ")


def test_run_local_renews_certificates_made_for_a_cluster_and_says_why(tmp_path):
    ensure_certs(tmp_path, SERVICE, NAMESPACE)
    line = run_local_line(tmp_path)
    assert line.startswith(f"Renewed the serving certificate in {tmp_path}/ (valid until ")
    assert line.endswith("it lacks localhost, 127.0.0.1.")
    assert "localhost" in sans(tmp_path / "tls.crt")[0]


# --- --patch-configuration: the caBundle on every webhook of the configuration, by name ------------------------

class FakeApi:
    """The two calls patch_configuration makes, over one stored configuration; ``conflicts`` updates are
    answered 409 first (someone else wrote in between)."""

    def __init__(self, stored: dict | None, conflicts: int = 0):
        self.stored, self.conflicts, self.updates = stored, conflicts, 0

    def get(self, res, namespace, name):
        from policylib.shell import kube
        if self.stored is None or self.stored["metadata"]["name"] != name:
            raise kube.NotFound(404, f"{res.plural} {name!r} not found")
        return self.stored

    def update(self, res, namespace, name, body):
        from policylib.shell import kube
        self.updates += 1
        if self.conflicts:
            self.conflicts -= 1
            raise kube.Conflict(409, "the object has been modified")
        self.stored = body
        return body


def shipped_configuration() -> dict:
    import yaml
    return yaml.safe_load((REPO / "manifests" / "base" / "mutatingwebhookconfiguration.yaml").read_text())


def test_patch_configuration_sets_the_ca_bundle_on_every_webhook_by_name_and_is_idempotent():
    from webhook.cabundle import patch_configuration
    shipped = shipped_configuration()
    names = [h["name"] for h in shipped["webhooks"]]
    assert len(names) == 8 and {"gang-pods.policylib.io", "jobsets.policylib.io", "trainjobs.policylib.io",
                                "statefulsets.policylib.io", "leaderworkersets.policylib.io"} <= set(names)
    api = FakeApi(shipped, conflicts=1)
    assert patch_configuration(api, "policylib-webhook", "Q0E=") == (names, names)
    assert [h["clientConfig"]["caBundle"] for h in api.stored["webhooks"]] == ["Q0E="] * 8
    assert [h["clientConfig"]["service"] for h in api.stored["webhooks"]] == \
        [h["clientConfig"]["service"] for h in shipped["webhooks"]]
    assert api.updates == 2       # one conflict, then written
    assert patch_configuration(api, "policylib-webhook", "Q0E=") == (names, [])
    assert api.updates == 2       # nothing to change: nothing written


def test_patch_configuration_names_what_is_missing():
    from webhook.cabundle import patch_configuration
    with pytest.raises(CertError, match="mutatingwebhookconfiguration 'other' not found: apply the manifests first"):
        patch_configuration(FakeApi(shipped_configuration()), "other", "Q0E=")
    empty = {"metadata": {"name": "empty"}, "webhooks": []}
    with pytest.raises(CertError, match="'empty' has no webhooks"):
        patch_configuration(FakeApi(empty), "empty", "Q0E=")
    with pytest.raises(CertError, match=r"kept changing .* \(5 conflicts\)"):
        patch_configuration(FakeApi(shipped_configuration(), conflicts=9), "policylib-webhook", "Q0E=")


def test_cli_patch_configuration_without_a_kubeconfig_is_one_line_and_exit_2(tmp_path):
    run = certs_cli("--out", str(tmp_path / "c"), "--patch-configuration", "policylib-webhook",
                    "--kubeconfig", str(tmp_path / "missing"))
    assert run.returncode == 2, run.stderr
    assert base64.b64decode(run.stdout.strip()) == (tmp_path / "c" / "ca.crt").read_bytes()
    assert run.stderr.splitlines()[-1].startswith("webhook: error: no kubeconfig found at ")
    assert "Traceback" not in run.stderr

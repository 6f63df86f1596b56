"""webhook.certs and ``python -m webhook certs``: what the API server's Go TLS client checks."""
from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import subprocess
import sys

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from tests.helpers import REPO
from webhook.certs import CertError, ensure_certs

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


def test_serving_certificate_has_the_service_names_localhost_and_loopback_as_sans(certs):
    cert = load(certs[0] / "tls.crt")
    san = ext(cert, x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [
        "policylib-webhook", "policylib-webhook.policylib-system", "policylib-webhook.policylib-system.svc",
        "policylib-webhook.policylib-system.svc.cluster.local", "localhost"]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]


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
    state = ensure_certs(directory, SERVICE, NAMESPACE, now=ca.not_valid_after_utc - dt.timedelta(days=100))
    assert (state.new_ca, state.new_serving) == (True, True)
    assert load(directory / "ca.crt").serial_number != ca.serial_number


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


def test_cli_error_is_one_line_and_exit_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    run = subprocess.run([sys.executable, "-m", "webhook", "certs", "--out", str(blocker / "sub")],
                         cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr.startswith("webhook: error: cannot create ") and run.stderr.count("\n") == 1

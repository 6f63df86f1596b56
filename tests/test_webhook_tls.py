"""The webhook's TLS, by real handshakes: TLS 1.2 with AEAD suites only, ``--tls-min-version 1.3``, and client
certificates (``--client-ca``: rule W13), with what an anonymous caller learns from ``/readyz`` and errors.

Servers are ``python -m webhook serve`` subprocesses (tests/test_webhook_server.py's helpers); the RSA
certificate's suites are checked against the server's own context in this process.
"""
from __future__ import annotations

import datetime as dt
import json
import socket
import ssl
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

import policylib
from tests.helpers import REPO, deployment
from tests.test_webhook_server import Server, SvcConnection, client_context, free_port, make_certs
from tests.webhook_support import SVC_HOST, patched, review_of
from webhook.admission.certificate import TLS12_CIPHERS, make_server_context

pytestmark = pytest.mark.timeout(180)

#: What the server accepts over TLS 1.2, by its certificate's key: ECDHE and AEAD.
AEAD_ECDSA = {"ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-ECDSA-CHACHA20-POLY1305"}
AEAD_RSA = {"ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES256-GCM-SHA384", "ECDHE-RSA-CHACHA20-POLY1305"}
#: The suites TLS 1.2 still accepted before: CBC with SHA-2 HMACs.
CBC = {"ECDHE-ECDSA-AES128-SHA256", "ECDHE-ECDSA-AES256-SHA384"}


# --- certificates of our own ------------------------------------------------------------------------------------------

def _name(text: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])


def new_ca(name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(_name(name)).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return cert, key


def new_leaf(ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey], name: str, usage: x509.ObjectIdentifier,
             key=None, sans: tuple[str, ...] = ()):
    key = key or ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(ca[0].subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in sans]), critical=False)
    return builder.sign(ca[1], hashes.SHA256()), key


def write(directory: Path, stem: str, cert: x509.Certificate, key=None) -> tuple[Path, Path | None]:
    directory.mkdir(parents=True, exist_ok=True)
    cert_path = directory / f"{stem}.crt"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    if key is None:
        return cert_path, None
    key_path = directory / f"{stem}.key"
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def non_loopback_address() -> str:
    """An address of this machine that is not loopback (the source of its route out), or skip."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("198.51.100.1", 9))   # TEST-NET-2: nothing is sent, the route is looked up
        except OSError:
            pytest.skip("this machine has no route off loopback: no address to call the server from")
        address = probe.getsockname()[0]
    if address.startswith("127."):
        pytest.skip("this machine's only address is loopback")
    return address


# --- TLS 1.2: AEAD suites only ----------------------------------------------------------------------------------------

def tls12_suites(auth: str) -> list[str]:
    """Every TLS 1.2 ECDHE suite this Python's OpenSSL can offer for ``auth`` (``auth-ecdsa``, ``auth-rsa``)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.set_ciphers("ALL:@SECLEVEL=0")
    return [c["name"] for c in context.get_ciphers()
            if c["protocol"] == "TLSv1.2" and c["kea"] == "kx-ecdhe" and c["auth"] == auth]


def offering(suite: str, cert_dir: Path, maximum: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2) -> ssl.SSLContext:
    """A client trusting ``cert_dir``'s ``ca.crt`` that offers ``suite`` alone."""
    context = client_context(cert_dir)
    context.maximum_version = maximum
    context.set_ciphers(f"{suite}:@SECLEVEL=0")
    return context


def handshake(address: tuple[str, int], context: ssl.SSLContext) -> str | None:
    """The suite agreed, or None when the server refused the handshake."""
    with socket.create_connection(address, timeout=10) as raw:
        try:
            with context.wrap_socket(raw, server_hostname=SVC_HOST) as tls:
                return tls.cipher()[0]
        except ssl.SSLError:
            return None


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tls")
    make_certs(tmp / "certs")
    srv = Server(tmp / "certs", tmp, workers=1)
    yield srv
    assert srv.stop() == 0


def test_tls_1_2_accepts_the_aead_suites_only_one_handshake_per_suite(server):
    """Every TLS 1.2 ECDHE-ECDSA suite offered alone, against the server (its certificate is ECDSA): the three AEAD
    ones are agreed, every other one (the CBC suites among them) refused."""
    suites = tls12_suites("auth-ecdsa")
    assert set(suites) >= CBC and set(suites) >= AEAD_ECDSA   # this OpenSSL can offer what is checked
    agreed = {suite: handshake(("127.0.0.1", server.port), offering(suite, server.cert_dir))
              for suite in suites}
    assert {suite for suite, got in agreed.items() if got} == AEAD_ECDSA
    assert all(agreed[suite] == suite for suite in AEAD_ECDSA)


def test_with_an_rsa_certificate_the_rsa_aead_suites_only(tmp_path):
    """The server's context with an RSA certificate (``--cert-dir`` takes one too), one real handshake per TLS 1.2
    ECDHE-RSA suite over a socket pair."""
    ca = new_ca("rsa-ca")
    cert, key = new_leaf(ca, SVC_HOST, ExtendedKeyUsageOID.SERVER_AUTH, key=rsa.generate_private_key(65537, 2048),
                         sans=(SVC_HOST,))
    cert_path, key_path = write(tmp_path, "tls", cert, key)
    write(tmp_path, "ca", ca[0])
    server_context = make_server_context(cert_path, key_path)

    def agreed(suite: str) -> str | None:
        near, far = socket.socketpair()
        served = threading.Thread(target=lambda: _serve_one(server_context, far), daemon=True)
        served.start()
        try:
            with offering(suite, tmp_path).wrap_socket(near, server_hostname=SVC_HOST) as tls:
                return tls.cipher()[0]
        except ssl.SSLError:
            return None
        finally:
            near.close()
            served.join(10)

    suites = tls12_suites("auth-rsa")
    assert set(suites) >= AEAD_RSA and len(suites) > len(AEAD_RSA)
    assert {suite for suite in suites if agreed(suite)} == AEAD_RSA


def _serve_one(context: ssl.SSLContext, sock: socket.socket) -> None:
    try:
        with context.wrap_socket(sock, server_side=True):
            pass
    except (ssl.SSLError, OSError):
        sock.close()


def test_the_server_list_is_the_aead_list():
    assert set(TLS12_CIPHERS.split(":")) == AEAD_ECDSA | AEAD_RSA


# --- TLS 1.3 minimum ----------------------------------------------------------------------------------------------------

def test_tls_min_version_1_3_from_the_environment_refuses_tls_1_2(tmp_path):
    """``POLICYLIB_WEBHOOK_TLS_MIN_VERSION=1.3`` (the chart's ``webhook.tls.minVersion``): a client that offers at most
    TLS 1.2, even an AEAD suite, is refused; TLS 1.3 is served; the start-up line and /readyz (on loopback) say so."""
    make_certs(tmp_path / "certs")
    server = Server(tmp_path / "certs", tmp_path, workers=1, env={"POLICYLIB_WEBHOOK_TLS_MIN_VERSION": "1.3"})
    try:
        address = ("127.0.0.1", server.port)
        assert handshake(address, offering("ECDHE-ECDSA-AES128-GCM-SHA256", server.cert_dir)) is None
        context = client_context(server.cert_dir)
        with socket.create_connection(address, timeout=10) as raw, \
                context.wrap_socket(raw, server_hostname=SVC_HOST) as tls:
            assert tls.version() == "TLSv1.3"
        assert server.request("GET", "/readyz")[1]["tls"]["minVersion"] == "1.3"
        assert "(TLS 1.3 or newer by webhook.admission.worker.TLSGeventWorker" in server.logs()
        assert server.review(review_of(deployment("web", "ml"), uid="tls13"))["allowed"] is True
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("args,env,message", [
    (("--tls-min-version", "1.1"), {}, "argument --tls-min-version: must be 1.2 or 1.3, got '1.1'"),
    ((), {"POLICYLIB_WEBHOOK_TLS_MIN_VERSION": "1.1"},
     "webhook: error: POLICYLIB_WEBHOOK_TLS_MIN_VERSION: must be 1.2 or 1.3, got '1.1'"),
    ((), {"POLICYLIB_WEBHOOK_FIRST_REQUEST_TIMEOUT": "soon"},
     "webhook: error: POLICYLIB_WEBHOOK_FIRST_REQUEST_TIMEOUT: must be a positive number of seconds, got 'soon'"),
])
def test_a_bad_setting_in_a_flag_or_its_variable_is_one_line_and_exit_2(tmp_path, args, env, message):
    make_certs(tmp_path / "certs")
    run = subprocess.run([sys.executable, "-m", "webhook", "serve", "--cert-dir", str(tmp_path / "certs"),
                          "--port", str(free_port()), *args], cwd=REPO, capture_output=True, text=True, timeout=60,
                         env={**_environment(), **env})
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1].endswith(message), run.stderr


def _environment() -> dict:
    import os
    return {k: v for k, v in os.environ.items() if not k.startswith("POLICYLIB_WEBHOOK_")}


# --- client certificates (rule W13) -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def clients(tmp_path_factory):
    """A client CA, a client certificate it signs (extended key usage clientAuth, as the API server's), one it signs
    for servers only, and one of another CA."""
    tmp = tmp_path_factory.mktemp("clients")
    ca = new_ca("apiserver-client-ca")
    other = new_ca("someone-else")
    paths = {"ca": write(tmp, "client-ca", ca[0])[0]}
    paths["client"] = write(tmp, "client", *new_leaf(ca, "kube-apiserver", ExtendedKeyUsageOID.CLIENT_AUTH))
    paths["server-only"] = write(tmp, "server-only", *new_leaf(ca, "kube-apiserver", ExtendedKeyUsageOID.SERVER_AUTH))
    paths["other"] = write(tmp, "other", *new_leaf(other, "kube-apiserver", ExtendedKeyUsageOID.CLIENT_AUTH))
    return paths


@pytest.fixture(scope="module")
def authenticated(tmp_path_factory, clients):
    """``--client-ca``, listening on every address (the non-loopback caller's tests)."""
    tmp = tmp_path_factory.mktemp("authenticated")
    make_certs(tmp / "certs")
    srv = Server(tmp / "certs", tmp, workers=1, host="0.0.0.0", extra=("--client-ca", str(clients["ca"])))
    yield srv
    assert srv.stop() == 0
    assert "Traceback" not in srv.logs(), srv.logs()


def presenting(server: Server, pair: tuple[Path, Path] | None) -> ssl.SSLContext:
    context = client_context(server.cert_dir)
    if pair is not None:
        context.load_cert_chain(str(pair[0]), str(pair[1]))
    return context


def call(server: Server, method: str, path: str, pair=None, body=None, address: str = "127.0.0.1"):
    conn = SvcConnection(server.port, presenting(server, pair), address=address)
    return server.request(method, path, body, conn)


def test_a_review_needs_a_client_certificate_the_client_ca_verified(authenticated, clients):
    """Rule W13: without a certificate, 403 (the policy is not run, nothing is looked up); with the API server's
    (clientAuth, signed by the client CA), the review is answered as policylib decides."""
    review = review_of(deployment("web", "ml"), uid="authenticated")
    status, body = call(authenticated, "POST", "/mutate", body=review)
    assert (status, body) == (403, {"error": "a client certificate verified by the webhook's client CA is required",
                                    "code": 403})
    status, body = call(authenticated, "POST", "/mutate", clients["client"], body=review)
    assert status == 200 and body["response"]["uid"] == "authenticated"
    obj = review["request"]["object"]
    assert patched(obj, body["response"]) == policylib.mutate(obj, None, namespace="ml").object
    assert authenticated.metric('policylib_webhook_bad_requests_total{code="403"}') >= 1
    assert "client certificates verified by" in authenticated.logs()


@pytest.mark.parametrize("presented", ["other", "server-only"])
def test_a_certificate_of_another_ca_or_not_for_clients_is_refused_in_the_handshake(authenticated, clients, presented):
    """A certificate the client CA did not sign, or one it signed for servers only (no clientAuth), ends the
    connection in the TLS handshake: no request is read."""
    uid = f"refused-{presented}"
    with pytest.raises((ssl.SSLError, ConnectionError)):   # TLS 1.3: the client learns it on its first read
        call(authenticated, "POST", "/mutate", clients[presented], body=review_of(deployment("web", "ml"), uid=uid))
    assert uid not in authenticated.stdout_path.read_text()   # never reviewed


def test_probes_need_no_certificate_and_an_anonymous_caller_learns_ready_or_not(authenticated, clients):
    """The kubelet's probes present no certificate: /healthz and /readyz answer. /readyz's detail (the certificate's
    path, the pid, the mode) goes to a verified caller and to loopback (kubectl port-forward); from another address an
    anonymous caller gets ``{"ready": true}``."""
    address = non_loopback_address()
    assert call(authenticated, "GET", "/healthz", address=address) == (200, {"status": "ok"})
    assert call(authenticated, "GET", "/readyz", address=address) == (200, {"ready": True})
    status, detail = call(authenticated, "GET", "/readyz", clients["client"], address=address)
    assert status == 200 and detail["tls"]["clientCA"] == str(clients["ca"]) and detail["pid"] > 0
    status, local = call(authenticated, "GET", "/readyz")
    assert status == 200 and local["tls"]["certificate"] == str(authenticated.cert_dir / "tls.crt")


def test_an_error_body_quotes_at_most_a_short_prefix_of_the_input(authenticated, clients):
    """A 5 MB ``apiVersion`` does not come back: the 400's message is at most 200 characters."""
    body = json.dumps({"apiVersion": "x" * 5_000_000, "kind": "AdmissionReview", "request": {}}).encode()
    server = authenticated
    status, answer = call(server, "POST", "/mutate", clients["client"], body=body)
    assert status == 400 and len(answer["error"]) <= 200
    assert answer["error"].startswith("body must be an admission.k8s.io/v1 AdmissionReview, got apiVersion='xxx")


def test_a_new_client_ca_is_used_for_new_connections_without_a_restart(tmp_path):
    """The client CA file is read again when it changes (a Secret's update), as the serving certificate is."""
    make_certs(tmp_path / "certs")
    first, second = new_ca("first"), new_ca("second")
    ca_path = write(tmp_path / "ca", "client-ca", first[0])[0]
    by_first = write(tmp_path, "by-first", *new_leaf(first, "kube-apiserver", ExtendedKeyUsageOID.CLIENT_AUTH))
    by_second = write(tmp_path, "by-second", *new_leaf(second, "kube-apiserver", ExtendedKeyUsageOID.CLIENT_AUTH))
    server = Server(tmp_path / "certs", tmp_path, workers=1, env={"POLICYLIB_WEBHOOK_CLIENT_CA": str(ca_path)})
    try:
        review = review_of(deployment("web", "ml"), uid="rotated")
        assert call(server, "POST", "/mutate", by_first, body=review)[0] == 200
        replacement = ca_path.with_suffix(".new")
        replacement.write_bytes(second[0].public_bytes(serialization.Encoding.PEM))
        replacement.replace(ca_path)
        assert call(server, "POST", "/mutate", by_second, body=review)[0] == 200
        with pytest.raises(ssl.SSLError):
            call(server, "POST", "/mutate", by_first, body=review)
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("content,problem", [(None, "no such file"), (b"not a certificate\n", "holds no PEM certificate")])
def test_an_unusable_client_ca_is_one_line_and_exit_2(tmp_path, content, problem):
    make_certs(tmp_path / "certs")
    ca = tmp_path / "client-ca.crt"
    if content is not None:
        ca.write_bytes(content)
    run = subprocess.run([sys.executable, "-m", "webhook", "serve", "--cert-dir", str(tmp_path / "certs"),
                          "--client-ca", str(ca), "--port", str(free_port())], cwd=REPO, capture_output=True,
                         text=True, timeout=60, env=_environment())
    assert run.returncode == 2
    assert run.stderr == f"webhook: error: --client-ca {ca}: {problem}\n"

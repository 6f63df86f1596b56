"""Making the webhook's certificates with ``cryptography``: a self-signed CA and a serving certificate it signs,
with the Service's names (and, for a local run, loopback) as SANs, extended key usage ``serverAuth``: what the API
server's Go TLS client checks (the Common Name is ignored)."""
from __future__ import annotations

import datetime as dt
import ipaddress

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from policylib.constants import LOOPBACK_ADDRESS

#: A key that signs a certificate (ours are P-256; a CA read from disk may be RSA).
PrivateKey = CertificateIssuerPrivateKeyTypes
#: A certificate and its key.
Pair = tuple[x509.Certificate, PrivateKey]

DEFAULT_DAYS = 365
CA_DAYS = 3650
CLOCK_SKEW = dt.timedelta(minutes=5)
LOCAL_DNS = ("localhost",)
LOCAL_IPS = (LOOPBACK_ADDRESS,)


def service_dns_names(service: str, namespace: str, local: bool = False) -> list[str]:
    """The names a Service is reached by in-cluster, then (``local``) the loopback name."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
            f"{service}.{namespace}.svc.cluster.local", *(LOCAL_DNS if local else ())]


def serving_ips(local: bool = False) -> list[str]:
    """The IP address SANs: loopback only, and only for a local run."""
    return list(LOCAL_IPS) if local else []


def ca_days(days: int) -> int:
    """A new CA's lifetime: ``CA_DAYS``, or three serving lifetimes when that is longer."""
    return max(CA_DAYS, days * 3)


def _new_key() -> ec.EllipticCurvePrivateKey:
    """ECDSA P-256: accepted by Go's crypto/tls and cheaper to handshake than RSA."""
    return ec.generate_private_key(ec.SECP256R1())


def common_name(name: str) -> str:
    """A Common Name fits X.509's 64 characters (``NAME.NS.svc`` of a long namespace does not): cut from the
    left, keeping the end. Clients check the SANs, never the Common Name."""
    return name[-64:]


def _builder(subject: str, issuer: x509.Name, key: PrivateKey, now: dt.datetime, days: int,
             lifetime: dt.timedelta | None = None) -> x509.CertificateBuilder:
    """``lifetime`` (the certificate rotator's, in seconds) overrides ``days``."""
    return (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name(subject))]))
            .issuer_name(issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - CLOCK_SKEW)
            .not_valid_after(now + (lifetime if lifetime is not None else dt.timedelta(days=days))))


def make_ca(service: str, now: dt.datetime, days: int = CA_DAYS, lifetime: dt.timedelta | None = None) -> Pair:
    """A self-signed CA: basicConstraints CA:TRUE, may sign certificates only."""
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name(f"{service}-ca"))])
    cert = (_builder(f"{service}-ca", name, key, now, days, lifetime)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=True, crl_sign=True,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return cert, key


def make_serving(ca_cert: x509.Certificate, ca_key: PrivateKey, service: str, namespace: str,
                 now: dt.datetime, days: int = DEFAULT_DAYS, local: bool = False,
                 lifetime: dt.timedelta | None = None) -> Pair:
    """The serving certificate: DNS (and, ``local``, loopback) SANs, EKU serverAuth, signed by the CA."""
    key = _new_key()
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in service_dns_names(service, namespace, local)]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in serving_ips(local)]
    cert = (_builder(f"{service}.{namespace}.svc", ca_cert.subject, key, now, days, lifetime)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=False, crl_sign=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    return cert, key

"""``python -m webhook certs | serve | run-local | controller``.

User errors (bad config, unusable certificate directory, a bad setting in a flag
or its environment variable) print one line and exit 2; nothing prints a
traceback for them. A server setting with an environment variable
(:data:`SERVER_ENVIRONMENT`) takes the flag when given, else the variable, else
its default.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from policylib.constants import (
    ANY_ADDRESS,
    INSTALL_NAMESPACE,
    WEBHOOK_CA_SECRET,
    WEBHOOK_CONFIGURATION,
    WEBHOOK_PORT,
    WEBHOOK_SERVICE,
    WEBHOOK_TLS_SECRET,
)

try:
    from .certs import DEFAULT_DAYS, CertError, CertState, ensure_certs
except ModuleNotFoundError as missing:   # the base install (rule L1): one line naming the extra, exit 2
    sys.stderr.write(f"python -m webhook: error: the server needs the webhook extra ({missing.name} is not "
                     "installed): pip install 'policylib[webhook]'\n")
    raise SystemExit(2) from None

if TYPE_CHECKING:
    from .server import ServeOptions

SERVICE = WEBHOOK_SERVICE
NAMESPACE = INSTALL_NAMESPACE
SAMPLE = "deployment-create.json"
#: The samples run-local offers a curl for: one per workload family, each changed by the default config.
SAMPLES = (("a Deployment", "deployment-create.json"),
           ("a Volcano Job: its policylib.io/partition-size annotation asks for partitions of 3 "
            "(the default config sets no partition size)", "volcano-job-create.json"),
           ("a TFJob", "tfjob-create.json"))


def ca_change_note(directory: str, state: CertState) -> str:
    """The line that says the CA, and so the caBundle, changed, and why."""
    return (f"{directory}: the CA changes, and so does the caBundle: {state.reason}. The new CA is valid until "
            f"{state.ca_not_after:%Y-%m-%d} UTC; put the new caBundle (below) wherever the old one is "
            f"(the MutatingWebhookConfiguration) before serving the new certificate.")


def cmd_certs(args: argparse.Namespace) -> int:
    """Make or keep the certificates; status on stderr, the caBundle alone on stdout. With
    ``--patch-configuration``, also put the caBundle on every webhook of that configuration."""
    state = ensure_certs(args.out, args.service, args.namespace, days=args.days, renew=args.renew, local=args.local)
    if state.replaced_ca:
        print(ca_change_note(args.out, state), file=sys.stderr)
    what = "new CA and serving certificate" if state.new_ca else \
        "new serving certificate" if state.new_serving else "kept both certificates"
    print(f"{args.out}: {what} ({state.reason}); serving certificate for {', '.join(state.sans)} valid until "
          f"{state.not_after:%Y-%m-%d %H:%M} UTC. caBundle:", file=sys.stderr)
    print(state.ca_bundle, flush=True)
    if args.patch_configuration:
        from policylib.shell import kube

        from .certs import patch_configuration
        api = kube.Api(kube.api_client(args.context, args.kubeconfig))
        names, changed = patch_configuration(api, args.patch_configuration, state.ca_bundle)
        done = f"set on {len(changed)} of them" if changed else "already on every one"
        print(f"mutatingwebhookconfiguration/{args.patch_configuration}: the caBundle is {done} "
              f"({len(names)} webhooks: {', '.join(names)})", file=sys.stderr)
    return 0


class SettingError(ValueError):
    """A server setting's environment variable holds a value its flag would refuse."""


def _serve_options(args: argparse.Namespace, **overrides: Any) -> ServeOptions:
    from .server import ServeOptions
    fields = dict(cert_dir=args.cert_dir, config=getattr(args, "config", None), host=args.host, port=args.port,
                  workers=args.workers, threads=args.threads, max_connections=args.max_connections,
                  graceful_timeout=args.graceful_timeout,
                  facts=getattr(args, "facts", "auto"), kubeconfig=getattr(args, "kubeconfig", None),
                  log_level=args.log_level, reuse_port=getattr(args, "reuse_port", False),
                  **{name: _setting(args, name) for name in SERVER_ENVIRONMENT})
    fields.update(overrides)
    return ServeOptions(**fields)


def _setting(args: argparse.Namespace, name: str) -> Any:
    """The flag's value when given, else its environment variable's (checked as the flag is), else the default."""
    value = getattr(args, name)
    if value is not None:
        return value
    variable, parse, default = SERVER_ENVIRONMENT[name]
    raw = os.environ.get(variable, "")
    if not raw:
        return default
    try:
        return parse(raw)
    except argparse.ArgumentTypeError as e:
        raise SettingError(f"{variable}: {e}") from None


def cooperative() -> None:
    """gevent's monkey patching, first: before ``ssl``, urllib3 and the kubernetes client are imported.

    gunicorn's gevent worker patches too, but in the worker, after the master has imported them;
    urllib3 holds ``ssl`` names imported before the patch, and its contexts then fail with
    RecursionError (gevent issue 1016). gevent's documented fix is to patch first, in every process.
    """
    from gevent import monkey
    monkey.patch_all()


def cmd_serve(args: argparse.Namespace) -> int:
    cooperative()
    from .server import serve
    serve(_serve_options(args))
    return 0


def certificate_settings(args: argparse.Namespace, namespace: str) -> Any:
    """``--certificates self``: the rotator's settings (webhook/controller/certrotator.py); otherwise None."""
    if args.certificates != "self":
        return None
    from .controller.certplan import Settings, parse_duration
    try:
        settings = Settings(namespace=namespace, service=args.certificates_service,
                            webhook_configuration=args.certificates_webhook_configuration,
                            ca_secret=args.certificates_ca_secret, tls_secret=args.certificates_tls_secret,
                            ca_seconds=parse_duration(args.certificates_ca_duration),
                            serving_seconds=parse_duration(args.certificates_serving_duration),
                            propagation_seconds=parse_duration(args.certificates_propagation))
    except ValueError as e:
        raise CertError(str(e)) from None
    if settings.problems():
        raise CertError("; ".join(settings.problems()))
    return settings


def cmd_controller(args: argparse.Namespace) -> int:
    from .controller import run_controller
    namespace = args.namespace or os.environ.get("POD_NAMESPACE") or INSTALL_NAMESPACE
    return run_controller(args.config, dry_run=args.dry_run, namespace=args.namespace, kubeconfig=args.kubeconfig,
                          context=args.context, host=args.host, port=args.port,
                          certificates=certificate_settings(args, namespace),
                          webhook_configuration=args.webhook_configuration)


def sample_path(name: str = SAMPLE) -> Path:
    """A sample AdmissionReview shipped as package data."""
    return Path(str(resources.files("webhook") / "samples" / name))


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it is below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def curl_command(cert_dir: str, host: str, port: int, sample: str = SAMPLE) -> str:
    """A ready-to-paste curl that posts a sample review and checks the chain against ca.crt."""
    if host in (ANY_ADDRESS, "::", ""):
        host = "127.0.0.1"
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    parts = ["curl", "-sS", "--cacert", _shown(Path(cert_dir) / "ca.crt"), "-H", "Content-Type: application/json",
             "--data-binary", "@" + _shown(sample_path(sample)), f"https://{netloc}/mutate"]
    return " ".join(shlex.quote(p) for p in parts)


DECODE = ("python3 -c 'import base64,json,sys; r=json.load(sys.stdin)[\"response\"]; "
          "print(json.dumps(r, indent=2)); print(json.dumps(json.loads(base64.b64decode(r[\"patch\"])), indent=2))'")


def run_local_certs_line(cert_dir: str, state: CertState) -> str:
    """What run-local says about its certificates: a first run is not an error."""
    cert_dir = cert_dir.rstrip("/") or "/"
    until = f"valid until {state.not_after:%Y-%m-%d}"
    if state.new_ca and not state.replaced_ca:
        return (f"Created a local CA and a serving certificate for localhost and 127.0.0.1 in {cert_dir}/ "
                f"({until}); curl trusts them through {cert_dir}/ca.crt.")
    if state.new_ca:
        return f"Made a new local CA and serving certificate in {cert_dir}/ ({until}): {state.reason}."
    if state.new_serving:
        return f"Renewed the serving certificate in {cert_dir}/ ({until}): {state.reason}."
    return f"Using the certificates in {cert_dir}/ ({until})."


def run_local_banner(cert_dir: str, host: str, port: int) -> str:
    """The address, a curl per workload family's sample, and how to decode the patch."""
    curls = [(what, curl_command(cert_dir, host, port, name)) for what, name in SAMPLES]
    lines = [f"policylib webhook on https://{host}:{port} with the default config "
             f"(no cluster: HPAs are not read, the object's own replicas count).",
             "In another terminal, post a sample review:", ""]
    for what, curl in curls:
        lines += [f"  # {what}", f"  {curl}", ""]
    lines += ["To see the answer and the decoded patch, pipe any of them into:", "", f"  {DECODE}", ""]
    return "\n".join(lines)


def cmd_run_local(args: argparse.Namespace) -> int:
    """Certificates in ``--cert-dir`` if missing (with the loopback SANs), the curls to try, then serve with
    the default config."""
    import policylib
    policylib.load_config(args.config)   # a bad --config is one clear error before anything starts
    state = ensure_certs(args.cert_dir, SERVICE, NAMESPACE, local=True)
    print(run_local_certs_line(args.cert_dir, state), file=sys.stderr)
    print("\n" + run_local_banner(args.cert_dir, args.host, args.port), flush=True)
    cooperative()
    from .server import serve
    serve(_serve_options(args, facts="none"))
    return 0


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value!r}")
    return number


def _positive_seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {value!r}") from None
    if not 0 < seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {value!r}")
    return seconds


def _tls_version(value: str) -> str:
    if value not in TLS_MIN_VERSIONS:
        raise argparse.ArgumentTypeError(f"must be {' or '.join(TLS_MIN_VERSIONS)}, got {value!r}")
    return value


def _path(value: str) -> str:
    return value


#: ``--tls-min-version``'s values (``webhook.server.TLS_VERSIONS``'s keys, without importing the server).
TLS_MIN_VERSIONS = ("1.2", "1.3")
#: The server settings an environment variable can give (the flag wins): dest -> (variable, parse, default).
SERVER_ENVIRONMENT: dict[str, tuple[str, Any, Any]] = {
    "first_request_timeout": ("POLICYLIB_WEBHOOK_FIRST_REQUEST_TIMEOUT", _positive_seconds, 5.0),
    "tls_min_version": ("POLICYLIB_WEBHOOK_TLS_MIN_VERSION", _tls_version, "1.2"),
    "client_ca": ("POLICYLIB_WEBHOOK_CLIENT_CA", _path, None),
}


def _add_server_args(p: argparse.ArgumentParser, host: str, workers: int) -> None:
    p.add_argument("--cert-dir", required=True, help="directory holding tls.crt and tls.key")
    p.add_argument("--host", default=host, help=f"address to listen on (default {host})")
    p.add_argument("--port", type=int, default=WEBHOOK_PORT, help=f"port (default {WEBHOOK_PORT})")
    p.add_argument("--workers", type=int, default=workers, help=f"gunicorn worker processes (default {workers})")
    p.add_argument("--threads", type=int, default=4,
                   help="accepted for compatibility and ignored: each connection is a greenlet of its worker")
    p.add_argument("--max-connections", type=_positive, default=1000,
                   help="open connections one worker holds at most (default 1000); at that many, each new connection "
                        "closes the one that has waited longest without a request")
    p.add_argument("--first-request-timeout", type=_positive_seconds, metavar="SECONDS",
                   help="seconds a new connection has, after its TLS handshake, to begin its first request (default 5; "
                        "environment POLICYLIB_WEBHOOK_FIRST_REQUEST_TIMEOUT); between requests the keep-alive "
                        "timeout (120 s) applies")
    p.add_argument("--tls-min-version", type=_tls_version, metavar="{1.2,1.3}",
                   help="oldest TLS version accepted: 1.2 (its AEAD suites only) or 1.3 (default 1.2; environment "
                        "POLICYLIB_WEBHOOK_TLS_MIN_VERSION)")
    p.add_argument("--client-ca", metavar="FILE",
                   help="PEM file of the CA that signs the API server's client certificate: reviews are then answered "
                        "only to callers presenting one it verifies (default: none required; environment "
                        "POLICYLIB_WEBHOOK_CLIENT_CA)")
    p.add_argument("--graceful-timeout", type=int, default=20,
                   help="seconds SIGTERM waits for in-flight requests (default 20)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.add_argument("--reuse-port", action="store_true",
                   help="bind with SO_REUSEPORT: several servers on one address and port, the kernel spreading new "
                        "connections over them (replicas on one machine)")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m webhook", description="policylib's mutating admission webhook")
    sub = top.add_subparsers(dest="command", required=True)

    c = sub.add_parser("certs", help="make or renew the CA and serving certificate; prints the caBundle")
    c.add_argument("--service", default=SERVICE, help=f"Service name (default {SERVICE})")
    c.add_argument("--namespace", default=NAMESPACE, help=f"its namespace (default {NAMESPACE})")
    c.add_argument("--out", required=True, help="directory for ca.crt, ca.key, tls.crt, tls.key")
    c.add_argument("--days", type=int, default=DEFAULT_DAYS,
                   help=f"serving certificate lifetime in days (default {DEFAULT_DAYS})")
    c.add_argument("--renew", action="store_true", help="issue a new serving certificate from the kept CA")
    c.add_argument("--local", action="store_true",
                   help="also issue the loopback SANs localhost and 127.0.0.1 (a webhook reached on this machine); "
                        "without it the SANs are the Service's names only")
    c.add_argument("--patch-configuration", metavar="NAME",
                   help="also set this caBundle on every webhook of the MutatingWebhookConfiguration NAME (by name, "
                        "whatever their number or order), through the API with the kubeconfig kubectl uses")
    c.add_argument("--kubeconfig", help="with --patch-configuration: kubeconfig (default: $KUBECONFIG, ~/.kube/config)")
    c.add_argument("--context", help="with --patch-configuration: kubeconfig context")
    c.set_defaults(func=cmd_certs)

    s = sub.add_parser("serve", help="serve the webhook over TLS with gunicorn")
    s.add_argument("--config", help="policy config (YAML); default: the built-in defaults")
    _add_server_args(s, ANY_ADDRESS, 2)
    s.add_argument("--facts", choices=["auto", "watch", "none"], default="auto",
                   help="cluster facts (HPAs): auto = watch when running in a pod or with --kubeconfig")
    s.add_argument("--kubeconfig", help="watch HPAs with this kubeconfig (outside a cluster)")
    s.set_defaults(func=cmd_serve)

    ctl = sub.add_parser("controller", help="keep existing objects right: apply policylib's plan (leader-elected)")
    ctl.add_argument("--config", help="policy config (YAML); default: the built-in defaults")
    ctl.add_argument("--dry-run", action="store_true", help="log the plan as JSON lines and write nothing")
    ctl.add_argument("--namespace", help=f"namespace of the Lease (default: $POD_NAMESPACE or {INSTALL_NAMESPACE})")
    ctl.add_argument("--kubeconfig", help="kubeconfig (default: $KUBECONFIG, ~/.kube/config, then in-cluster)")
    ctl.add_argument("--context", help="kubeconfig context")
    ctl.add_argument("--host", default=ANY_ADDRESS, help=f"address of /healthz, /readyz, /metrics (default {ANY_ADDRESS})")
    ctl.add_argument("--port", type=int, default=8081, help="port of /healthz, /readyz, /metrics (default 8081)")
    ctl.add_argument("--webhook-configuration", default=WEBHOOK_CONFIGURATION,
                     help="the MutatingWebhookConfiguration whose namespaceSelector and objectSelector say which "
                          f"objects the controller acts on (default {WEBHOOK_CONFIGURATION}; docs/controller.md, "
                          "\"Scope\")")
    ctl.add_argument("--certificates", choices=["none", "self"], default="none",
                     help="self: the leader creates and rotates the webhook's CA and serving certificate Secrets and "
                          "the webhook configuration's caBundle (docs/operations.md, \"Certificates\")")
    ctl.add_argument("--certificates-service", default=SERVICE, help=f"the webhook's Service (default {SERVICE})")
    ctl.add_argument("--certificates-webhook-configuration", default=WEBHOOK_CONFIGURATION,
                     help=f"the MutatingWebhookConfiguration whose caBundle is kept (default {WEBHOOK_CONFIGURATION})")
    ctl.add_argument("--certificates-ca-secret", default=WEBHOOK_CA_SECRET, help=f"default {WEBHOOK_CA_SECRET}")
    ctl.add_argument("--certificates-tls-secret", default=WEBHOOK_TLS_SECRET, help=f"default {WEBHOOK_TLS_SECRET}")
    ctl.add_argument("--certificates-ca-duration", default="43800h", help="CA lifetime (default 43800h, 5 years)")
    ctl.add_argument("--certificates-serving-duration", default="8760h",
                     help="serving certificate lifetime (default 8760h); renewed when a third is left")
    ctl.add_argument("--certificates-propagation", default="180s",
                     help="how long a new caBundle or Secret takes to reach the API server and every webhook replica "
                          "(default 180s: the kubelet's Secret sync period plus its cache TTL, with margin)")
    ctl.set_defaults(func=cmd_controller)

    r = sub.add_parser("run-local", help="certificates if missing, a curl to try, and serve with the defaults")
    r.add_argument("--config", help="policy config (YAML); default: the built-in defaults")
    _add_server_args(r, "127.0.0.1", 1)
    r.set_defaults(func=cmd_run_local)
    return top


def main(argv: list[str] | None = None, log_to: TextIO | None = None) -> int:
    """Run a command line. ``log_to``: where the process's log goes, as JSON lines (webhook/logs.py); the
    process's entry point gives stderr, a caller in a process of its own leaves its logging alone."""
    import policylib
    args = parser().parse_args(argv)
    if log_to is not None:
        from .logs import configure
        configure(getattr(args, "log_level", "info"), log_to)
    try:
        return int(args.func(args))
    except (policylib.PolicylibError, CertError, SettingError) as e:
        print(f"webhook: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:
        from kubernetes.config import ConfigException

        from policylib.shell.kube import KubeconfigNotFound
        if isinstance(e, (KubeconfigNotFound, ConfigException)):  # no kubeconfig, or --facts watch without access
            print(f"webhook: error: {e}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main(log_to=sys.stderr))

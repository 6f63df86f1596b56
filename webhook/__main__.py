"""``python -m webhook certs | serve | controller | run-local``: one :class:`~policylib.cli.common.Command`
per subcommand, listed once in :data:`COMMANDS`; each command's settings are declared in webhook/options.py.

User errors (bad config, unusable certificate directory, a bad setting in a flag or its environment variable)
print one line and exit 2; nothing prints a traceback for them.
"""
from __future__ import annotations

import argparse
import logging
import shlex
import sys
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from policylib.constants import ANY_ADDRESS, INSTALL_NAMESPACE, LOOPBACK_ADDRESS, WEBHOOK_SERVICE

try:
    from .certs import CertError, CertState, ensure_certs
except ModuleNotFoundError as missing:   # the base install (rule L1): one line naming the extra, exit 2
    sys.stderr.write(f"python -m webhook: error: the server needs the webhook extra ({missing.name} is not "
                     "installed): pip install 'policylib[webhook]'\n")
    raise SystemExit(2) from None

from . import options
from .options import Option, SettingError

if TYPE_CHECKING:
    from policylib.cli.common import AddParser, Command

    from .admission.server import ServeOptions

log = logging.getLogger(__name__)

SAMPLE = "deployment-create.json"
#: The samples run-local offers a curl for: one per workload family, each changed by the default config.
SAMPLES = (("a Deployment", "deployment-create.json"),
           ("a Volcano Job: its policylib.io/partition-size annotation asks for partitions of 3 "
            "(the default config sets no partition size)", "volcano-job-create.json"),
           ("a TFJob", "tfjob-create.json"))
#: The exit statuses of ``policylib``'s commands (policylib.cli.common), written here so that the webhook's processes
#: do not import the CLI (tests/test_webhook_options.py checks they agree).
EXIT_OK, EXIT_ERROR = 0, 2
#: What every command's exit status means.
EXIT_STATUS = {EXIT_OK: "done (serve, controller, run-local: stopped by SIGTERM or SIGINT)",
               EXIT_ERROR: "a user error, named in one line: a bad flag, environment variable or config, an unusable "
                           "certificate directory, no kubeconfig"}


class WebhookCommand:
    """What the commands share: the parser made from :attr:`OPTIONS`, the exit statuses, the warning for a
    setting given that has no effect."""

    NAME: str
    HELP: str
    OPTIONS: tuple[Option, ...]
    EXIT_STATUS = EXIT_STATUS

    def add_parser(self, add: AddParser) -> argparse.ArgumentParser:
        p = add(self.NAME, help=self.HELP)
        for option in self.OPTIONS:
            option.add_to(p)
        return p

    def settings(self, args: argparse.Namespace) -> dict[str, Any]:
        """dest -> value of each option (flag, else environment, else default); warns of each one given that has
        no effect."""
        for option in self.OPTIONS:
            if option.no_effect and getattr(args, option.dest) is not None:
                log.warning("flag has no effect", extra={"flag": option.flag, "reason": option.no_effect})
        return options.values(self.OPTIONS, args)

    def run(self, args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
        return self.start(self.settings(args), stdout, stderr)

    def start(self, s: dict[str, Any], stdout: TextIO, stderr: TextIO) -> int:
        """The command, given its settings (:meth:`settings`)."""
        raise NotImplementedError


def ca_change_note(directory: str, state: CertState) -> str:
    """The line that says the CA, and so the caBundle, changed, and why."""
    return (f"{directory}: the CA changes, and so does the caBundle: {state.reason}. The new CA is valid until "
            f"{state.ca_not_after:%Y-%m-%d} UTC; put the new caBundle (below) wherever the old one is "
            f"(the MutatingWebhookConfiguration) before serving the new certificate.")


class Certs(WebhookCommand):
    """Make or keep the certificates; status on stderr, the caBundle alone on stdout. With
    ``--patch-configuration``, also put the caBundle on every webhook of that configuration."""

    NAME = "certs"
    HELP = "make or renew the CA and serving certificate; prints the caBundle"
    OPTIONS = options.CERTS

    def start(self, s: dict[str, Any], stdout: TextIO, stderr: TextIO) -> int:
        state = ensure_certs(s["out"], s["service"], s["namespace"], days=s["days"], renew=s["renew"],
                             local=s["local"])
        if state.replaced_ca:
            print(ca_change_note(s["out"], state), file=stderr)
        what = "new CA and serving certificate" if state.new_ca else \
            "new serving certificate" if state.new_serving else "kept both certificates"
        print(f"{s['out']}: {what} ({state.reason}); serving certificate for {', '.join(state.sans)} valid until "
              f"{state.not_after:%Y-%m-%d %H:%M} UTC. caBundle:", file=stderr)
        print(state.ca_bundle, file=stdout, flush=True)
        if s["patch_configuration"]:
            self.patch(s, state.ca_bundle, stderr)
        return EXIT_OK

    @staticmethod
    def patch(s: dict[str, Any], ca_bundle: str, stderr: TextIO) -> None:
        from policylib.shell import kube

        from .cabundle import patch_configuration
        api = kube.Api(kube.api_client(s["context"], s["kubeconfig"]))
        names, changed = patch_configuration(api, s["patch_configuration"], ca_bundle)
        done = f"set on {len(changed)} of them" if changed else "already on every one"
        print(f"mutatingwebhookconfiguration/{s['patch_configuration']}: the caBundle is {done} "
              f"({len(names)} webhooks: {', '.join(names)})", file=stderr)


def serve_options(settings: dict[str, Any], **overrides: Any) -> ServeOptions:
    """The server's settings from the command's (``--threads`` has no effect and is not passed on)."""
    from .admission.server import ServeOptions
    fields = {k: v for k, v in settings.items() if k != "threads"}
    fields.update(overrides)
    return ServeOptions(**fields)


def cooperative() -> None:
    """gevent's monkey patching, first: before ``ssl``, urllib3 and the kubernetes client are imported.

    gunicorn's gevent worker patches too, but in the worker, after the master has imported them;
    urllib3 holds ``ssl`` names imported before the patch, and its contexts then fail with
    RecursionError (gevent issue 1016). gevent's documented fix is to patch first, in every process.
    """
    from gevent import monkey
    monkey.patch_all()



class Serve(WebhookCommand):
    NAME = "serve"
    HELP = "serve the webhook over TLS with gunicorn"
    OPTIONS = options.SERVE

    def start(self, s: dict[str, Any], stdout: TextIO, stderr: TextIO) -> int:
        cooperative()
        from .admission.server import serve
        serve(serve_options(s))
        return EXIT_OK


class Controller(WebhookCommand):
    NAME = "controller"
    HELP = "keep existing objects right: apply policylib's plan (leader-elected)"
    OPTIONS = options.CONTROLLER

    def start(self, s: dict[str, Any], stdout: TextIO, stderr: TextIO) -> int:
        from .controller import run_controller
        return run_controller(s["config"], dry_run=s["dry_run"], namespace=s["namespace"],
                              kubeconfig=s["kubeconfig"], context=s["context"], host=s["host"], port=s["port"],
                              certificates=certificate_settings(s), webhook_configuration=s["webhook_configuration"])


def certificate_settings(s: dict[str, Any]) -> Any:
    """``--certificates self``: the rotator's settings (webhook/controller/certrotator.py); otherwise None."""
    if s["certificates"] != "self":
        return None
    from .controller.certplan import Settings, parse_duration
    try:
        settings = Settings(namespace=s["namespace"], service=s["certificates_service"],
                            webhook_configuration=s["certificates_webhook_configuration"],
                            ca_secret=s["certificates_ca_secret"], tls_secret=s["certificates_tls_secret"],
                            ca_seconds=parse_duration(s["certificates_ca_duration"]),
                            serving_seconds=parse_duration(s["certificates_serving_duration"]),
                            propagation_seconds=parse_duration(s["certificates_propagation"]))
    except ValueError as e:
        raise CertError(str(e)) from None
    if settings.problems():
        raise CertError("; ".join(settings.problems()))
    return settings


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
        host = LOOPBACK_ADDRESS
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


class RunLocal(WebhookCommand):
    """Certificates in ``--cert-dir`` if missing (with the loopback SANs), the curls to try, then serve with the
    default config."""

    NAME = "run-local"
    HELP = "certificates if missing, a curl to try, and serve with the defaults"
    OPTIONS = options.RUN_LOCAL

    def start(self, s: dict[str, Any], stdout: TextIO, stderr: TextIO) -> int:
        import policylib
        policylib.load_config(s["config"])   # a bad --config is one clear error before anything starts
        state = ensure_certs(s["cert_dir"], WEBHOOK_SERVICE, INSTALL_NAMESPACE, local=True)
        print(run_local_certs_line(s["cert_dir"], state), file=stderr)
        print("\n" + run_local_banner(s["cert_dir"], s["host"], s["port"]), file=stdout, flush=True)
        cooperative()
        from .admission.server import serve
        serve(serve_options(s, facts="none"))
        return EXIT_OK


#: The commands, in the order ``python -m webhook --help`` lists them; adding one is adding its class and its entry.
COMMANDS: tuple[Command, ...] = (Certs(), Serve(), Controller(), RunLocal())


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m webhook", description="policylib's mutating admission webhook")
    sub = top.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub.add_parser).set_defaults(func=command.run)
    return top


def main(argv: list[str] | None = None, log_to: TextIO | None = None) -> int:
    """Run a command line. ``log_to``: where the process's log goes, as JSON lines (webhook/logs.py); the
    process's entry point gives stderr, a caller in a process of its own leaves its logging alone."""
    import policylib
    args = parser().parse_args(argv)
    if log_to is not None:
        from .logs import configure
        configure(getattr(args, "log_level", None) or "info", log_to)
    try:
        return int(args.func(args, sys.stdin, sys.stdout, sys.stderr))
    except (policylib.PolicylibError, CertError, SettingError) as e:
        print(f"webhook: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as e:
        from kubernetes.config import ConfigException

        from policylib.shell.kube import KubeconfigNotFound
        if isinstance(e, (KubeconfigNotFound, ConfigException)):  # no kubeconfig, or --facts watch without access
            print(f"webhook: error: {e}", file=sys.stderr)
            return EXIT_ERROR
        raise


if __name__ == "__main__":
    sys.exit(main(log_to=sys.stderr))

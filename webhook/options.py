"""The settings of ``python -m webhook``'s commands, declared once each.

Each :class:`Option` is one setting of one process: its flag, type, default, help, environment variable and the
Helm chart value the chart passes as that flag. The commands' argparse flags (webhook/__main__.py), the
environment variables read, docs/reference/flags.md (tools/gen_reference.py) and the check that the chart and the
manifests pass each value to its flag (tests/test_webhook_options.py) are made from these declarations; adding a
setting is adding one :class:`Option` to its command's tuple.

A setting with an environment variable takes the flag when given, else the variable (checked as the flag is),
else its default.
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

from policylib.constants import (
    ANY_ADDRESS,
    CONTROLLER_PORT,
    INSTALL_NAMESPACE,
    LOOPBACK_ADDRESS,
    WEBHOOK_CA_SECRET,
    WEBHOOK_CONFIGURATION,
    WEBHOOK_PORT,
    WEBHOOK_SERVICE,
    WEBHOOK_TLS_SECRET,
)

from .certmake import DEFAULT_DAYS


class SettingError(ValueError):
    """A setting's environment variable holds a value its flag would refuse."""


# --- the values' types: argparse names the flag, :meth:`Option.value` the variable ---------------------

def positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value!r}")
    return number


def positive_seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {value!r}") from None
    if not 0 < seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {value!r}")
    return seconds


#: ``--tls-min-version``'s values (the keys of the server's ``TLS_VERSIONS``, without importing the server).
TLS_MIN_VERSIONS = ("1.2", "1.3")
LOG_LEVELS = ("debug", "info", "warning", "error")
FACTS = ("auto", "watch", "none")
CERTIFICATES = ("none", "self")


def choice_of(values: tuple[str, ...]) -> Callable[[str], str]:
    """A type that accepts one of ``values`` (for a setting an environment variable can give too)."""
    def parse(value: str) -> str:
        if value not in values:
            raise argparse.ArgumentTypeError(f"must be {' or '.join(values)}, got {value!r}")
        return value
    return parse


def text(value: str) -> str:
    return value


@dataclass(frozen=True)
class Option:
    """One setting of a command: ``--flag``, its type and default, its help, and where else it can come from."""

    flag: str
    help: str
    default: Any = None
    #: Turns the flag's text into the value (argparse's ``type``); ``None``: the text itself.
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    required: bool = False
    #: A flag without a value (``store_true``).
    switch: bool = False
    #: The environment variable that gives the value when the flag is not given.
    env: str | None = None
    #: The Helm value (dotted path in charts/policylib/values.yaml) the chart passes as this flag.
    chart: str | None = None
    #: Accepted and without effect: the warning printed when it is given.
    no_effect: str | None = None

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    def but(self, **changes: Any) -> Option:
        """This setting with another default or help (the same flag on another command)."""
        return replace(self, **changes)

    def help_text(self) -> str:
        where = []
        if self.default is not None and not self.switch:
            where.append(f"default {self.default}")
        if self.env:
            where.append(f"environment {self.env}")
        return f"{self.help} ({'; '.join(where)})" if where else self.help

    def add_to(self, parser: argparse.ArgumentParser) -> argparse.Action:
        kwargs: dict[str, Any] = {"help": self.help_text()}
        if self.switch:
            kwargs["action"] = "store_true"
        else:
            kwargs.update(type=self.type or (choice_of(self.choices) if self.env and self.choices else None),
                          metavar=self.metavar or ("{" + ",".join(self.choices) + "}" if self.env and self.choices
                                                   else None))
            if self.choices and not self.env:
                kwargs["choices"] = self.choices
            if self.required:
                kwargs["required"] = True
            # A setting read from the environment or without effect keeps None when the flag is not given.
            elif not self.env and not self.no_effect:
                kwargs["default"] = self.default
        return parser.add_argument(self.flag, **{k: v for k, v in kwargs.items() if v is not None})

    def value(self, args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Any:
        """The flag's value when given, else the environment variable's (checked as the flag is), else the default."""
        given = getattr(args, self.dest)
        if given is not None or not self.env:
            return given
        raw = (os.environ if environ is None else environ).get(self.env, "")
        if not raw:
            return self.default
        parse = self.type or (choice_of(self.choices) if self.choices else text)
        try:
            return parse(raw)
        except argparse.ArgumentTypeError as e:
            raise SettingError(f"{self.env}: {e}") from None


def defaults(options: tuple[Option, ...]) -> dict[str, Any]:
    """dest -> default of each option."""
    return {o.dest: o.default for o in options}


def values(options: tuple[Option, ...], args: argparse.Namespace,
           environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """dest -> value of each option (see :meth:`Option.value`)."""
    return {o.dest: o.value(args, environ) for o in options}


# --- the declarations ----------------------------------------------------------------------------------

CONFIG = Option("--config", "policy config (YAML); default: the built-in defaults", metavar="FILE")
KUBECONFIG_FOR_FACTS = Option("--kubeconfig", "watch HPAs with this kubeconfig (outside a cluster)")

#: The admission server's settings (``serve``; ``run-local`` takes them too, with its own defaults).
SERVER: tuple[Option, ...] = (
    Option("--cert-dir", "directory holding tls.crt and tls.key", required=True),
    Option("--host", "address to listen on", ANY_ADDRESS),
    Option("--port", "port", WEBHOOK_PORT, type=int),
    Option("--workers", "gunicorn worker processes", 2, type=int, chart="webhook.workers"),
    Option("--threads", "has no effect (a warning is logged when given): each connection is a greenlet of its "
           "worker; accepted so that command lines that give it keep working", type=int,
           no_effect="--threads has no effect: each connection is a greenlet of its worker"),
    # gunicorn's ``worker_connections``: a worker stops accepting while it holds that many; the others, and the
    # kernel's backlog, take the rest.
    Option("--max-connections", "open connections one worker holds at most; at that many, each new connection "
           "closes the one that has waited longest without a request", 1000, type=positive,
           chart="webhook.maxConnections"),
    # A client of ours sends its request at once; the API server's HTTP client sometimes keeps a connection it
    # dialled for a request another connection served, and dials again when it needs one.
    Option("--first-request-timeout", "seconds a new connection has, after its TLS handshake, to begin its first "
           "request; between requests the keep-alive timeout (120 s) applies", 5.0, type=positive_seconds,
           metavar="SECONDS", env="POLICYLIB_WEBHOOK_FIRST_REQUEST_TIMEOUT",
           chart="webhook.firstRequestTimeoutSeconds"),
    Option("--tls-min-version", "oldest TLS version accepted: 1.2 (its AEAD suites only) or 1.3", "1.2",
           choices=TLS_MIN_VERSIONS, env="POLICYLIB_WEBHOOK_TLS_MIN_VERSION", chart="webhook.tls.minVersion"),
    Option("--client-ca", "PEM file of the CA that signs the API server's client certificate: reviews are then "
           "answered only to callers presenting one it verifies; without it no client certificate is asked for",
           metavar="FILE",
           env="POLICYLIB_WEBHOOK_CLIENT_CA"),
    Option("--graceful-timeout", "seconds SIGTERM waits for in-flight requests", 20, type=int),
    Option("--log-level", "the least severe log level written", "info", choices=LOG_LEVELS),
    Option("--reuse-port", "bind with SO_REUSEPORT: several servers on one address and port, the kernel spreading "
           "new connections over them (replicas on one machine)", switch=True),
)

SERVE: tuple[Option, ...] = (CONFIG, *SERVER,
                             Option("--facts", "cluster facts (HPAs): auto = watch when running in a pod or with "
                                    "--kubeconfig", "auto", choices=FACTS),
                             KUBECONFIG_FOR_FACTS)


def _run_local(option: Option) -> Option:
    """``run-local``: one worker on the loopback address (a server for this machine only)."""
    return {"--host": option.but(default=LOOPBACK_ADDRESS), "--workers": option.but(default=1)}.get(option.flag,
                                                                                                    option)


RUN_LOCAL: tuple[Option, ...] = (CONFIG, *map(_run_local, SERVER))

CONTROLLER: tuple[Option, ...] = (
    CONFIG,
    Option("--dry-run", "log the plan as JSON lines and write nothing", switch=True),
    Option("--namespace", "namespace of the Lease (and, with --certificates self, of the Secrets)", INSTALL_NAMESPACE,
           env="POD_NAMESPACE"),
    Option("--kubeconfig", "kubeconfig (default: $KUBECONFIG, ~/.kube/config, then in-cluster)"),
    Option("--context", "kubeconfig context"),
    Option("--host", "address of /healthz, /readyz, /metrics", ANY_ADDRESS),
    Option("--port", "port of /healthz, /readyz, /metrics", CONTROLLER_PORT, type=int),
    Option("--webhook-configuration", "the MutatingWebhookConfiguration whose namespaceSelector and objectSelector "
           "say which objects the controller acts on (docs/controller.md, \"Scope\")", WEBHOOK_CONFIGURATION),
    Option("--certificates", "self: the leader creates and rotates the webhook's CA and serving certificate Secrets "
           "and the webhook configuration's caBundle (docs/operations.md, \"Certificates\")", "none",
           choices=CERTIFICATES),
    Option("--certificates-service", "the webhook's Service", WEBHOOK_SERVICE),
    Option("--certificates-webhook-configuration", "the MutatingWebhookConfiguration whose caBundle is kept",
           WEBHOOK_CONFIGURATION),
    Option("--certificates-ca-secret", "the Secret of the CA", WEBHOOK_CA_SECRET),
    Option("--certificates-tls-secret", "the Secret of the serving certificate", WEBHOOK_TLS_SECRET),
    Option("--certificates-ca-duration", "CA lifetime (5 years)", "43800h", chart="certificates.self.caDuration"),
    Option("--certificates-serving-duration", "serving certificate lifetime; renewed when a third is left", "8760h",
           chart="certificates.self.servingDuration"),
    Option("--certificates-propagation", "how long a new caBundle or Secret takes to reach the API server and every "
           "webhook replica (the kubelet's Secret sync period plus its cache TTL, with margin)", "180s",
           chart="certificates.self.propagation"),
)

CERTS: tuple[Option, ...] = (
    Option("--service", "Service name", WEBHOOK_SERVICE),
    Option("--namespace", "its namespace", INSTALL_NAMESPACE),
    Option("--out", "directory for ca.crt, ca.key, tls.crt, tls.key", required=True),
    Option("--days", "serving certificate lifetime in days", DEFAULT_DAYS, type=int),
    Option("--renew", "issue a new serving certificate from the kept CA", switch=True),
    Option("--local", "also issue the loopback SANs localhost and 127.0.0.1 (a webhook reached on this machine); "
           "without it the SANs are the Service's names only", switch=True),
    Option("--patch-configuration", "also set this caBundle on every webhook of the MutatingWebhookConfiguration "
           "NAME (by name, whatever their number or order), through the API with the kubeconfig kubectl uses",
           metavar="NAME"),
    Option("--kubeconfig", "with --patch-configuration: kubeconfig (default: $KUBECONFIG, ~/.kube/config)"),
    Option("--context", "with --patch-configuration: kubeconfig context"),
)

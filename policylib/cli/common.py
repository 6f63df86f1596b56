"""What every command shares: the exit statuses, the :class:`Command` shape, the flags several commands
take, JSON output, and naming the file of an object an error is about."""
from __future__ import annotations

import argparse
import json
from typing import Any, Callable, Iterable, Protocol, Sequence, TextIO

from ..constants import WEBHOOK_CONFIGURATION
from ..documents import Document
from ..errors import InputError, PolicyError, PolicylibError, object_ref
from ..facts import namespace_of

EXIT_OK, EXIT_CHANGED, EXIT_ERROR, EXIT_DENIED = 0, 1, 2, 3
#: ``preview --exit-code``: a warning was printed (rule D4), and nothing was denied.
EXIT_WARNED = 4
#: ``plan``: an object could not be planned (its entry says why); the other writes are printed.
EXIT_UNPLANNED = 1
#: ``simulate``: some replica would stay Pending; ``check``: a finding is an error.
EXIT_PENDING = 3
#: What exit 2 means for a command that reads its input from files or from ``--cluster`` (:func:`add_cluster_source`).
CLUSTER_SOURCE_ERROR = "bad input or config, or (--cluster) the cluster cannot be read"


def cluster_source_exit_status(ok: str, pending: str | None = None) -> dict[int, str]:
    """The ``EXIT_STATUS`` of a command that reads files or ``--cluster``: what exit 0 means, what
    :data:`EXIT_PENDING` means where the command has a verdict, and :data:`CLUSTER_SOURCE_ERROR`."""
    status = {EXIT_OK: ok} if pending is None else {EXIT_OK: ok, EXIT_PENDING: pending}
    return {**status, EXIT_ERROR: CLUSTER_SOURCE_ERROR}

#: ``sub.add_parser`` of the top-level parser's subcommands: ``add(name, help=..., description=...)``.
AddParser = Callable[..., argparse.ArgumentParser]


class Command(Protocol):
    """One command of ``policylib``: a module of this package with these four names, listed in
    :data:`policylib.cli.app.COMMANDS`."""

    #: The command's name on the command line.
    NAME: str
    #: What each exit status means (docs/reference/cli.md is generated from it).
    EXIT_STATUS: dict[int, str]

    def add_parser(self, add: AddParser) -> argparse.ArgumentParser:
        """The command's parser, made by ``add`` (its name, help and description) with its flags."""

    def run(self, args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
        """Run the command: output on ``stdout``, notes on ``stderr``; returns the exit status. A user error
        is a :class:`~policylib.errors.PolicylibError` (one line, exit 2); anything else is a bug and raises."""


# --- flags ---------------------------------------------------------------------------------------

CONFIG_HELP = ("policy config: a config file, or the chart's values file (its config: section); default with "
               "--cluster: the installed controller's ConfigMap (see docs/configuration.md)")
DIR_HELP = "a directory: its *.yaml, *.yml and *.json files, sorted"


def add_kustomize(p: argparse.ArgumentParser) -> None:
    p.add_argument("-k", "--kustomize", metavar="DIR", action="append",
                   help="also the objects kubectl kustomize DIR builds (kubectl or kustomize on PATH); repeatable")


def add_recursive(p: argparse.ArgumentParser) -> None:
    p.add_argument("-R", "--recursive", action="store_true",
                   help="with -f DIR, also read the manifests in its subdirectories (as kubectl -R)")


def add_installed(p: argparse.ArgumentParser, scoped: bool = True) -> None:
    p.add_argument("--release", metavar="NAME", help="with --cluster and no --config: the config of this Helm release "
                                                     "(app.kubernetes.io/instance), in -n NAMESPACE when several")
    if not scoped:
        return
    p.add_argument("--webhook-configuration", metavar="NAME", default=WEBHOOK_CONFIGURATION,
                   help="with --cluster: the MutatingWebhookConfiguration whose selectors say which objects are in "
                        f"scope (default {WEBHOOK_CONFIGURATION})")


def kube_minor(text: str) -> int:
    """``--kube-version``'s value as the Kubernetes minor (rule G22); argparse names a bad one."""
    from ..workload_api import parse_kube_version
    try:
        return parse_kube_version(text)
    except PolicylibError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_kube_version(p: argparse.ArgumentParser, cluster: bool = True) -> None:
    """``--kube-version``: the Kubernetes version to decide version-dependent shapes for, offline (the word Helm
    uses; rule G22)."""
    p.add_argument("--kube-version", metavar="VERSION", type=kube_minor, dest="kube_version",
                   help="the Kubernetes version the objects are for (1.36, 1.37, v1.37.2): it decides the version and "
                        "shape of the Workload and PodGroup of gang.method workload (default: 1.37"
                        + ("; with --cluster, what the API server serves)" if cluster else ")"))


def add_cluster_source(p: argparse.ArgumentParser, files_required: bool, scoped: bool = False) -> None:
    """The flags of the commands that read Nodes and workloads from files or the live cluster."""
    p.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    p.add_argument("-f", "--filename", metavar="FILE", action="append",
                   help="workloads (Deployments with their HPAs, Volcano Jobs, Kubeflow jobs; Pods in a snapshot count "
                        "as load); repeatable; - reads stdin; " + DIR_HELP + (" (-f or -k required)" if files_required else ""))
    add_kustomize(p)
    add_recursive(p)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--nodes", metavar="FILE", action="append",
                     help="Nodes: Node documents or a List (kubectl get nodes -o yaml), or a directory; repeatable")
    src.add_argument("--cluster", action="store_true", help="read the live cluster's Nodes and Pods through kubeconfig")
    p.add_argument("--context", help="kubeconfig context (with --cluster)")
    p.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig file (with --cluster; default $KUBECONFIG, "
                                                        "~/.kube/config, or in-cluster)")
    p.add_argument("-n", "--namespace", help="only this namespace's workloads (with --cluster; Nodes and the Pods "
                                             "that load them are always read whole)")
    add_installed(p, scoped)
    add_kube_version(p)


# --- output --------------------------------------------------------------------------------------

def json_array(items: list[dict[str, Any]]) -> str:
    """A JSON array with one compact object per line: valid JSON, greppable, and fast
    (the C encoder; ``indent`` falls back to the slow pure-Python one)."""
    if not items:
        return "[]\n"
    return "[\n" + ",\n".join(json.dumps(i, separators=(",", ":")) for i in items) + "\n]\n"


def write_json_array(out: TextIO, items: Iterable[dict[str, Any]]) -> None:
    """:func:`json_array`'s output, written item by item: a plan of a big cluster never holds its whole
    output as one string."""
    first = True
    for item in items:
        out.write(("[\n" if first else ",\n") + json.dumps(item, separators=(",", ":")))
        first = False
    out.write("[]\n" if first else "\n]\n")


def progress(stderr: TextIO) -> Callable[[str, int], None]:
    """A one-line progress indicator on stderr (redrawn in place on a terminal)."""
    tty = stderr.isatty()

    def show(what: str, count: int) -> None:
        stderr.write(f"\rlisting {what}: {count}" + ("" if tty else "\n"))
        stderr.flush()
    return show


# --- errors --------------------------------------------------------------------------------------

def refs(obj: dict[str, Any]) -> set[str]:
    """The ways errors name ``obj``: with its namespace as written, and defaulted."""
    return {object_ref(obj), object_ref(obj, namespace_of(obj))}


def locate(error: PolicyError, docs: Sequence[Document], default: str | None = None) -> PolicylibError:
    """``error`` prefixed with the file of the object it names (an HPA in another
    file than the Deployment it targets), else with ``default``."""
    sources = list(dict.fromkeys(d.source for d in docs if error.obj_ref in refs(d.obj)))
    where = ", ".join(sources) or default
    return InputError(f"{where}: {error}") if where else error

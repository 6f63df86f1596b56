"""The ``policylib`` console script: the parser built from the commands' modules, and ``main``; the
``kubectl-policylib`` plugin and the ``policylib-pre-commit`` hook, which rewrite their arguments and
call ``main``."""
from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence, TextIO

from .. import __version__
from ..errors import PolicylibError
from . import check, completion, hypernodes, plan, preview, simulate
from .cluster import refuse_kube_version_with_cluster, require_cluster_client, require_offline_packages
from .common import EXIT_ERROR, EXIT_OK, Command
from .inputs import kustomize_sources

#: The commands, in the order ``policylib --help`` lists them. Adding a command is adding its module
#: (see :class:`~policylib.cli.common.Command`) and its entry here.
COMMANDS: tuple[Command, ...] = (preview, hypernodes, plan, simulate, check, completion)

#: What each command's exit status means (docs/reference/cli.md is generated from it).
EXIT_STATUS: dict[str, dict[int, str]] = {command.NAME: command.EXIT_STATUS for command in COMMANDS}


class _ShowVersion(Exception):
    """Raised by ``--version`` while parsing; :func:`main` prints the version to its stdout."""


class _VersionAction(argparse.Action):
    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, default: Any = argparse.SUPPRESS,
                 help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        raise _ShowVersion()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="policylib", description="Dry-run previews of what policylib's webhook "
                                     "and controller would do, without a cluster.")
    parser.add_argument("--version", action=_VersionAction, help="print 'policylib VERSION' and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub.add_parser).set_defaults(func=command.run)
    parser.set_defaults(root_parser=parser)
    return parser


def completion_script(shell: str) -> str:
    """``policylib completion SHELL``'s output: the completion script of this command line (rule L3)."""
    return completion.script_for(build_parser(), shell)


def main(argv: Sequence[str] | None = None, stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout,
         stderr: TextIO = sys.stderr) -> int:
    """Run a command line; returns its exit status. A user error (:class:`~policylib.errors.PolicylibError`)
    prints one line on stderr and returns 2; any other exception is a bug, and raises."""
    try:
        args = build_parser().parse_args(argv)
    except _ShowVersion:
        stdout.write(f"policylib {__version__}\n")
        return EXIT_OK
    try:
        refuse_kube_version_with_cluster(args)
        require_cluster_client(args)
        require_offline_packages(args)
        kustomize_sources(args, stderr)
        code: int = args.func(args, stdin, stdout, stderr)
        return code
    except PolicylibError as e:
        stderr.write(f"policylib: error: {e}\n")
        return EXIT_ERROR
    except BrokenPipeError:
        return EXIT_OK


#: kubectl's global flags that ``kubectl policylib`` passes on to the commands that read the cluster.
KUBECTL_FLAGS = ("--kubeconfig", "--context", "-n", "--namespace")


def kubectl_argv(argv: Sequence[str]) -> list[str]:
    """``kubectl policylib [FLAGS] COMMAND ...``: kubectl's global flags (``--kubeconfig``, ``--context``,
    ``-n``/``--namespace``, as ``--flag VALUE`` or ``--flag=VALUE``) given before the command move after it,
    where the commands that read the cluster take them; flags after the command stay where they are (rule L4)."""
    moved: list[str] = []
    rest = list(argv)
    while rest and rest[0].startswith("-"):
        flag, eq, _ = rest[0].partition("=")
        if flag not in KUBECTL_FLAGS:
            break
        if eq:
            moved.append(rest.pop(0))
        elif len(rest) > 1:
            moved += [rest.pop(0), rest.pop(0)]
        else:
            break
    if not rest or rest[0].startswith("-"):
        return list(argv)
    return [rest[0], *moved, *rest[1:]]


def kubectl_plugin() -> None:
    """The ``kubectl-policylib`` console script: ``kubectl policylib ...`` (see kubectl_argv)."""
    sys.exit(main(kubectl_argv(sys.argv[1:])))


def pre_commit_argv(argv: Sequence[str]) -> list[str]:
    """The pre-commit hook ``policylib-preview`` (.pre-commit-hooks.yaml): pre-commit runs the entry with the
    hook's ``args`` (``--config FILE``) and then the staged files; each file becomes a ``-f`` of ``policylib
    preview --exit-code -o diff``, so a manifest the webhook would change fails the commit with its diff
    (rule L5)."""
    hook = argparse.ArgumentParser(prog="policylib-pre-commit", description="policylib preview --exit-code -o diff "
                                   "on each file: the pre-commit hook policylib-preview")
    hook.add_argument("--config", metavar="FILE", help="policy config (YAML or Helm values)")
    hook.add_argument("files", nargs="*", metavar="FILE")
    args = hook.parse_args(argv)
    out = ["preview", "--exit-code", "-o", "diff"] + (["--config", args.config] if args.config else [])
    return out + [arg for f in args.files for arg in ("-f", f)]


def pre_commit() -> None:
    """The ``policylib-pre-commit`` console script: the entry of the pre-commit hook (see pre_commit_argv)."""
    argv = pre_commit_argv(sys.argv[1:])
    sys.exit(main(argv) if "-f" in argv else EXIT_OK)

"""``policylib`` command line: dry-run previews of what the webhook would do.

``policylib --version``

``policylib preview [--config FILE] -f FILE [-f FILE ...] [-R] [--old FILE]
[-o yaml|patch|patch-list|diff] [--exit-code]``

``policylib hypernodes -f NODES.yaml [-R] --config FILE [-o yaml|tree]``

``policylib plan [--config FILE] (-f SNAPSHOT ... [-R] | --cluster [--context C]
[--namespace NS]) [-o table|json]``

``-f`` takes a file, ``-`` (stdin) or a directory: every ``*.yaml``, ``*.yml``
and ``*.json`` file in it, sorted by name; ``-R`` also walks its
subdirectories, as kubectl does.

This package is the imperative shell: it reads files, calls the pure policy
functions and prints. User errors print one line on stderr and exit 2 (input
with no Kubernetes objects is one); with ``--exit-code`` the exit status is 1
when any object would change (like ``kubectl diff``), 4 when a warning was printed
(an unknown field, an HPA whose target is not in the input, a softened required
anti-affinity...), and 3 when an object it returns would still be denied by
Volcano's job admission.

One module per command (``preview``, ``hypernodes``, ``plan``, ``simulate``, ``check``, ``completion``),
each with ``NAME``, ``EXIT_STATUS``, ``add_parser`` and ``run`` (:class:`~policylib.cli.common.Command`),
listed in :data:`policylib.cli.app.COMMANDS`; :mod:`~policylib.cli.app` builds the parser from them and
runs one. Beside them: :mod:`~policylib.cli.common` (exit statuses, shared flags, JSON output),
:mod:`~policylib.cli.cluster` (``--cluster``: the one API client and its errors, the installed config and
scope), :mod:`~policylib.cli.inputs` (files, ``-k`` overlays, Nodes).
"""
from __future__ import annotations

from .app import EXIT_STATUS, build_parser, completion_script, kubectl_argv, kubectl_plugin, main, pre_commit, pre_commit_argv
from .common import EXIT_CHANGED, EXIT_DENIED, EXIT_ERROR, EXIT_OK, EXIT_PENDING, EXIT_UNPLANNED, EXIT_WARNED

__all__ = ["EXIT_CHANGED", "EXIT_DENIED", "EXIT_ERROR", "EXIT_OK", "EXIT_PENDING", "EXIT_STATUS", "EXIT_UNPLANNED",
           "EXIT_WARNED", "build_parser", "completion_script", "kubectl_argv", "kubectl_plugin", "main", "pre_commit",
           "pre_commit_argv"]

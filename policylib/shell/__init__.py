"""The imperative shell of policylib: everything that reads files or talks to the cluster.

``policylib`` itself (every module outside this package and :mod:`policylib.cli`) takes dicts and
settings and returns results: no file, network, terminal or server imports, enforced by
tests/test_layers.py. Above it, in this package: :mod:`policylib.shell.files` (configuration files and
manifests from disk or stdin) and :mod:`policylib.shell.kube` (the Kubernetes API: client, typed calls,
list, watch, snapshots). :mod:`policylib.cli` (the ``policylib`` console script) and ``webhook`` (the
server and the controller) build on both; nothing here imports ``webhook``. docs/architecture.md.
"""

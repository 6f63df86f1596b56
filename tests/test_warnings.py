"""Nothing of ours on stderr but our own words: every command runs with deprecations as errors.

A deprecation in a dependency we use (cryptography's DSA class, named at import, was one) reaches the team
as a failing test here, never a user as a warning printed before the command's own message. Every
``python -m webhook`` subcommand and every ``policylib`` command runs once, doing real work, with
``DeprecationWarning``, ``PendingDeprecationWarning`` and cryptography's own ``CryptographyDeprecationWarning``
(a ``UserWarning``, not a ``DeprecationWarning``) turned into errors: a warning then raises, and the command
fails with a traceback instead of its exit status.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import LAUNCH, REPO

pytestmark = pytest.mark.timeout(300)

EXAMPLES = REPO / "docs" / "examples"
AS_ERRORS = ("-c", LAUNCH)


def env(tmp_path: Path) -> dict[str, str]:
    """No kubeconfig anywhere, and no warnings filter from the caller's environment."""
    out = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "KUBECONFIG", "PROMETHEUS_MULTIPROC_DIR")}
    return {**out, "HOME": str(tmp_path), "PYTHONPATH": str(REPO), "KUBECONFIG": str(tmp_path / "no-kubeconfig")}


def run(tmp_path: Path, module: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *AS_ERRORS, module, *map(str, args)], cwd=tmp_path, text=True,
                          capture_output=True, timeout=120, env=env(tmp_path))


def test_the_launcher_turns_each_deprecation_into_an_error():
    for category in ("DeprecationWarning", "PendingDeprecationWarning",
                     "__import__('cryptography.utils').utils.CryptographyDeprecationWarning"):
        probe = subprocess.run([sys.executable, *AS_ERRORS, "warned"], capture_output=True, text=True, timeout=60,
                               env={**os.environ, "PYTHONPATH": str(probe_module(category))})
        assert probe.returncode == 1 and "Warning: from a module run" in probe.stderr, probe.stderr


def probe_module(category: str) -> Path:
    import tempfile
    where = Path(tempfile.mkdtemp(prefix="warned-"))
    (where / "warned.py").write_text(f"import warnings\nwarnings.warn('from a module run', {category})\n")
    return where


POLICYLIB = {
    "preview": ("preview", "--config", EXAMPLES / "enforce.yaml", "-f", EXAMPLES / "web.yaml", "-o", "diff"),
    "plan": ("plan", "-f", EXAMPLES / "snapshot.yaml"),
    "simulate": ("simulate", "-f", EXAMPLES / "llm-and-web.yaml", "--nodes", EXAMPLES / "gpu-cluster-nodes.yaml",
                 "--config", EXAMPLES / "enforce.yaml"),
    "check": ("check", "--nodes", EXAMPLES / "gpu-cluster-nodes.yaml", "-f", EXAMPLES / "llm-and-web.yaml"),
    "hypernodes": ("hypernodes", "-f", EXAMPLES / "volcano-nodes.yaml", "--config", EXAMPLES / "volcano-discovery.yaml"),
    "completion": ("completion", "bash"),
}


def test_every_policylib_command_is_listed_here():
    from policylib.cli.app import COMMANDS
    assert sorted(c.NAME for c in COMMANDS) == sorted(POLICYLIB)


@pytest.mark.parametrize("command", sorted(POLICYLIB))
def test_policylib_commands_print_no_deprecation(tmp_path, command):
    out = run(tmp_path, "policylib.cli", *POLICYLIB[command])
    assert "Traceback" not in out.stderr and "Warning" not in out.stderr, out.stderr
    assert out.returncode in (0, 3), out.stderr      # 3: simulate's and check's "something stays Pending"
    assert out.stdout


def test_webhook_certs_prints_no_deprecation(tmp_path):
    out = run(tmp_path, "webhook", "certs", "--out", tmp_path / "certs", "--local")
    assert out.returncode == 0
    assert out.stderr.startswith(f"{tmp_path}/certs: new CA and serving certificate (") and out.stderr.count("\n") == 1, \
        out.stderr
    assert sorted(p.name for p in (tmp_path / "certs").iterdir()) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]


def test_webhook_serve_without_certificates_prints_only_its_own_line(tmp_path):
    out = run(tmp_path, "webhook", "serve", "--cert-dir", tmp_path / "none")
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("webhook: error: "), out.stderr


def test_webhook_controller_without_a_kubeconfig_prints_only_its_own_line(tmp_path):
    out = run(tmp_path, "webhook", "controller")
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("webhook: error: "), out.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_webhook_run_local_serves_and_stops_without_a_deprecation(tmp_path):
    """The server itself, its workers (gunicorn, gevent, Flask, the policy) and a review answered."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, *AS_ERRORS, "webhook", "run-local", "--cert-dir", tmp_path / "certs",
                             "--port", str(port)], cwd=tmp_path, env=env(tmp_path), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        context = ssl.create_default_context(cafile=None)
        review = json.loads((REPO / "webhook" / "samples" / "deployment-create.json").read_text())
        deadline, answer = time.monotonic() + 60, None
        while answer is None and time.monotonic() < deadline and proc.poll() is None:
            if (tmp_path / "certs" / "ca.crt").exists():
                context = ssl.create_default_context(cafile=str(tmp_path / "certs" / "ca.crt"))
                request = urllib.request.Request(f"https://127.0.0.1:{port}/mutate", data=json.dumps(review).encode(),
                                                 headers={"Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(request, context=context, timeout=10) as response:
                        answer = json.loads(response.read())
                except OSError:
                    time.sleep(0.1)
            else:
                time.sleep(0.1)
        assert answer is not None, "run-local did not answer a review within 60 s"
        assert answer["response"]["allowed"] is True and answer["response"]["patch"]
    finally:
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr and "Warning" not in stderr, stderr

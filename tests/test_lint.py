"""ruff and mypy run with the suite, so `make test` (and CI) fails on a lint or type error.

The rule set and the mypy settings live in pyproject.toml: ruff's pyflakes, pycodestyle, bugbear,
simplify and isort rules over the tree; mypy strict on policylib and webhook (but for webhook's server,
app, review and metrics, --check-untyped-defs until they are clean).
"""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_passes():
    out = run("ruff", "check", "--no-cache", ".")
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_passes():
    out = run("mypy", "--cache-dir", str(ROOT / ".mypy_cache"))
    assert out.returncode == 0, out.stdout + out.stderr

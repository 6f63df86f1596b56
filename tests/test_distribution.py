"""The release as its users get it: the wheel and sdist built as a release is (``python -m build`` in an
isolated environment, ``twine check``), then installed, not the source tree, into fresh virtualenvs.

- ``pip install policylib``: the library and the offline commands, none of the server's packages;
  ``import policylib`` imports nothing of the server; the README's preview example and every CLI
  example of the docs run against it; ``--cluster`` names the extra; a downstream script passes
  ``mypy --strict`` against it (py.typed).
- ``pip install 'policylib[webhook]'``: the server, the controller and the Kubernetes client import.
- The server's install, as its image holds it (requirements/image.txt, without numpy and kubernetes-validate): the
  server answers a review, the controller's modules import, and the offline commands that need what it leaves out
  say so in one line (rule L6). tests/test_image.py runs the same in the image, on its Python.

The wheel is built once per session. Every package the build and the webhook extra need is kept as a wheel
in .venv/wheelhouse (``pip wheel`` at constraints.txt's pins, from the index only the first time); the
build's isolated environment and the fresh virtualenvs install from it with ``--no-index``. Time added to
``make test``: docs/figures.md#tests.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.helpers import REPO, answer_a_review

pytestmark = pytest.mark.timeout(900)

#: The server's packages: none is in the base install (docs/library.md#installing-the-library).
SERVER_DISTRIBUTIONS = {"flask", "gunicorn", "gevent", "kubernetes", "cryptography", "prometheus-client", "orjson",
                        "werkzeug"}
#: What ``import policylib`` must not import: the server, the cluster client, and numpy (imported on first use).
NOT_IMPORTED = {"flask", "gunicorn", "gevent", "kubernetes", "cryptography", "prometheus_client", "orjson", "werkzeug",
                "webhook", "numpy", "urllib3", "kubernetes_validate", "policylib.shell.kube", "policylib.cli"}
PIP = ("-m", "pip", "--disable-pip-version-check", "--no-input")


def run(*argv: str | Path, cwd: Path = REPO, env: dict[str, str] | None = None,
        timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **(env or {})))


def ok(*argv: str | Path, **kwargs: object) -> str:
    out = run(*argv, **kwargs)  # type: ignore[arg-type]
    assert out.returncode == 0, f"{shlex.join(map(str, argv))}: exit {out.returncode}\n{out.stdout}\n{out.stderr}"
    return out.stdout


def requirements() -> list[str]:
    """What a release build and the webhook extra's install need: the build backend, the base requirements
    and the webhook extra's (setup.cfg, pyproject.toml)."""
    import configparser

    import tomllib
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    lines = cfg["options"]["install_requires"].splitlines() + cfg["options.extras_require"]["webhook"].splitlines()
    build = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")] + build


@pytest.fixture(scope="session")
def wheelhouse() -> Path:
    return fill_wheelhouse()


def fill_wheelhouse() -> Path:
    """Every package the build and the webhook extra need, at constraints.txt's pins, as wheels in
    .venv/wheelhouse: filled from the index the first time, then only read (``--no-index``) while it
    has them all."""
    house = REPO / ".venv" / "wheelhouse"
    house.mkdir(parents=True, exist_ok=True)
    args = ("wheel", "--quiet", "--wheel-dir", house, "--find-links", house, "-c", REPO / "constraints.txt",
            *requirements())
    if run(sys.executable, *PIP, "wheel", "--no-index", *args[1:]).returncode:
        ok(sys.executable, *PIP, *args)
    return house


@pytest.fixture(scope="session")
def dist(wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``make dist``'s two steps, into a temporary directory: the sdist, the wheel built from it, both checked.
    The isolated build environment installs the build backend from the wheelhouse."""
    out = tmp_path_factory.mktemp("dist")
    ok(sys.executable, "-m", "build", "--outdir", out, REPO, env={"PIP_CONSTRAINT": str(REPO / "constraints.txt"),
                                                                  "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheelhouse)})
    ok(sys.executable, "-m", "twine", "check", "--strict", *sorted(out.iterdir()))
    return out


@pytest.fixture(scope="session")
def wheel(dist: Path) -> Path:
    (found,) = dist.glob("policylib-*.whl")
    return found


def venv(where: Path, wheelhouse: Path, requirement: str) -> Path:
    """A fresh virtualenv without pip (this interpreter's pip installs into it: ``pip --python``)."""
    ok(sys.executable, "-m", "venv", "--without-pip", where)
    python = where / "bin" / "python"
    pip(python, "install", "--quiet", "--no-index", "--find-links", wheelhouse, requirement)
    return python


def pip(python: Path, *args: str | Path) -> str:
    return ok(sys.executable, "-m", "pip", "--python", python, "--disable-pip-version-check", "--no-input", *args)


@pytest.fixture(scope="session")
def base(wheel: Path, wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``pip install policylib``: the python of a fresh virtualenv."""
    return venv(tmp_path_factory.mktemp("base") / "venv", wheelhouse, f"policylib @ {wheel.as_uri()}")


@pytest.fixture(scope="session")
def full(wheel: Path, wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``pip install 'policylib[webhook]'``: the python of a fresh virtualenv."""
    return venv(tmp_path_factory.mktemp("full") / "venv", wheelhouse, f"policylib[webhook] @ {wheel.as_uri()}")


@pytest.fixture(scope="session")
def server(wheel: Path, wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The server's install, as the image has it, on this Python: requirements/image.txt's distributions at their
    versions and the wheel, without dependencies (its hashes are of the image's Python's wheels, so not checked here;
    the wheelhouse holds every one: they are the webhook extra's less what the image leaves out)."""
    sys.path.insert(0, str(REPO / "tools"))
    import image_requirements
    listed = image_requirements.parse(image_requirements.IMAGE.read_text())
    where = tmp_path_factory.mktemp("server") / "venv"
    ok(sys.executable, "-m", "venv", "--without-pip", where)
    python = where / "bin" / "python"
    pip(python, "install", "--quiet", "--no-index", "--find-links", wheelhouse, "--no-deps",
        *(f"{name}=={version}" for name, (version, _) in listed.items()), wheel)
    return python


def distributions(python: Path) -> set[str]:
    listed = json.loads(pip(python, "list", "--format", "json"))
    return {d["name"].lower().replace("_", "-") for d in listed}


def offline(python: Path) -> dict[str, str]:
    """An environment that reaches nothing: no PATH into the source tree, no PYTHONPATH."""
    return {"PATH": f"{python.parent}{os.pathsep}/usr/bin:/bin", "PYTHONPATH": "", "PYTHONDONTWRITEBYTECODE": "1"}


# --- what ships ---------------------------------------------------------------------------------------

def test_the_wheel_carries_py_typed_the_samples_and_the_entry_points(wheel: Path, dist: Path):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "policylib/py.typed" in names
    samples = {f"webhook/samples/{p.name}" for p in (REPO / "webhook" / "samples").glob("*.json")}
    assert samples and samples <= names
    sources = {p.relative_to(REPO).as_posix() for package in ("policylib", "webhook") for p in (REPO / package).rglob("*.py")}
    assert sources <= names, sorted(sources - names)
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    for script in ("policylib = policylib.cli:main", "kubectl-policylib = policylib.cli:kubectl_plugin",
                   "policylib-pre-commit = policylib.cli:pre_commit"):
        assert script in text
    (sdist,) = dist.glob("policylib-*.tar.gz")
    assert sdist.name == f"policylib-{wheel.name.split('-')[1]}.tar.gz"


def test_the_version_comes_from_setup_cfg_alone(wheel: Path):
    import configparser

    import yaml
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    version = cfg["metadata"]["version"]
    assert wheel.name.startswith(f"policylib-{version}-")
    chart = yaml.safe_load((REPO / "charts" / "policylib" / "Chart.yaml").read_text())
    assert chart["appVersion"] == version
    assert f"newTag: {version}" in (REPO / "manifests" / "base" / "kustomization.yaml").read_text()


# --- pip install policylib ----------------------------------------------------------------------------

def test_the_base_install_has_the_library_and_none_of_the_server(base: Path):
    installed = distributions(base)
    assert {"policylib", "pyyaml", "jsonschema", "numpy", "kubernetes-validate", "shtab"} <= installed
    assert installed & SERVER_DISTRIBUTIONS == set()
    pip(base, "check")


def test_import_policylib_imports_nothing_of_the_server(base: Path, full: Path):
    """Neither where the server is missing nor where it is installed (the webhook extra)."""
    probe = "import json, sys, policylib; print(json.dumps(sorted(sys.modules)))"
    for python in (base, full):
        loaded = set(json.loads(ok(python, "-c", probe, cwd=python.parent, env=offline(python))))
        assert "policylib" in loaded and "yaml" in loaded
        assert {m for m in loaded if m in NOT_IMPORTED or m.split(".")[0] in NOT_IMPORTED} == set()


def test_the_readmes_preview_example_runs_from_the_base_install(base: Path):
    from tests.test_docs import ALL_EXAMPLES, matches
    (example,) = [e for e in ALL_EXAMPLES if e.page.name == "README.md" and e.command.startswith("policylib preview")]
    argv = shlex.split(example.command)
    out = run(base.parent / "policylib", *argv[1:], env=offline(base))
    assert out.returncode == 0, out.stderr
    assert matches(example.shown, out.stdout.splitlines()), out.stdout


def test_every_cli_example_of_the_docs_runs_against_the_installed_wheel(base: Path):
    """The docs' ``$ policylib`` examples (tests/test_docs.py finds them), run by the wheel's console script
    in the base install: what the package data and the offline commands need is in the wheel."""
    from tests.test_docs import ALL_EXAMPLES, matches
    env = dict(os.environ, PYTHONPATH="", COLUMNS="100", PYTHONUNBUFFERED="1",
               PATH=f"{base.parent}{os.pathsep}{os.environ['PATH']}")   # kubectl or kustomize for -k, as in test_docs
    failed = []
    for example in ALL_EXAMPLES:
        argv = shlex.split(example.command)
        out = subprocess.run([str(base.parent / "policylib"), *argv[1:]], cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, timeout=120, env=env)
        expected = 0 if example.exit_status is None else example.exit_status
        if out.returncode != expected or not matches(example.shown, out.stdout.splitlines()):
            failed.append(f"{example}: `{example.command}`: exit {out.returncode}\n{out.stdout}")
    assert len(ALL_EXAMPLES) >= 10
    assert failed == []


def test_cluster_without_the_client_names_the_extra_in_one_line(base: Path, tmp_path: Path):
    for argv in (["plan", "--cluster"], ["simulate", "-f", str(REPO / "docs/examples/web.yaml"), "--cluster"],
                 ["check", "--cluster"]):
        out = run(base.parent / "policylib", *argv, env=dict(offline(base), KUBECONFIG=str(tmp_path / "none")))
        assert (out.returncode, out.stdout) == (2, ""), out.stderr
        assert out.stderr == ("policylib: error: --cluster needs the Kubernetes client, which this install of policylib "
                              "leaves out: pip install 'policylib[webhook]'\n")


def test_the_server_in_the_base_install_names_the_extra(base: Path):
    out = run(base, "-m", "webhook", "serve", cwd=base.parent, env=offline(base))
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr == ("python -m webhook: error: the server needs the webhook extra (cryptography is not installed): "
                          "pip install 'policylib[webhook]'\n")


def test_a_downstream_script_passes_mypy_strict_against_the_installed_wheel(base: Path, tmp_path: Path):
    script = tmp_path / "downstream_typed.py"
    script.write_text((REPO / "tests" / "downstream_typed.py").read_text())
    (tmp_path / "mypy.ini").write_text("[mypy]\n")
    out = run(sys.executable, "-m", "mypy", "--strict", "--config-file", tmp_path / "mypy.ini", "--python-executable",
              base, "--cache-dir", tmp_path / ".mypy_cache", script, cwd=tmp_path, env={"MYPYPATH": "", "PYTHONPATH": ""})
    assert out.returncode == 0, out.stdout + out.stderr
    ran = ok(base, script, cwd=tmp_path, env=offline(base))
    assert ran.splitlines()[0] == wheel_version(base)


def wheel_version(python: Path) -> str:
    return ok(python, "-c", "import policylib; print(policylib.__version__)", cwd=python.parent, env=offline(python)).strip()


def test_mypy_strict_fails_a_downstream_call_that_loses_its_types(base: Path, tmp_path: Path):
    """The check can fail: the same script with a wrong expectation of a public name's type."""
    script = tmp_path / "wrong.py"
    script.write_text("from typing import assert_type\nfrom policylib import Result, mutate\n"
                      "assert_type(mutate({}), dict[str, object])\n")
    (tmp_path / "mypy.ini").write_text("[mypy]\n")
    out = run(sys.executable, "-m", "mypy", "--strict", "--config-file", tmp_path / "mypy.ini", "--python-executable",
              base, "--cache-dir", tmp_path / ".mypy_cache", script, cwd=tmp_path, env={"MYPYPATH": "", "PYTHONPATH": ""})
    assert out.returncode == 1
    assert 'Expression is of type "Result", not "dict[str, object]"' in out.stdout


# --- pip install 'policylib[webhook]' -------------------------------------------------------------------

def test_the_webhook_extra_installs_the_server_and_the_client(full: Path):
    assert SERVER_DISTRIBUTIONS | {"packaging"} <= distributions(full)   # packaging: gunicorn's gevent worker
    pip(full, "check")
    ok(full, "-c", "import webhook.admission.app, webhook.admission.server, webhook.controller, kubernetes",
       cwd=full.parent, env=offline(full))
    usage = ok(full, "-m", "webhook", "--help", cwd=full.parent, env=offline(full))
    assert "serve" in usage and "controller" in usage


def test_constraints_pin_exactly_what_the_image_installs(full: Path):
    """constraints.txt stays coherent with setup.cfg: the webhook extra's install (what the image installs) is
    pinned whole, at the pinned versions (the pins also hold the test tools and the build backend)."""
    from packaging.utils import canonicalize_name
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version
    listed = json.loads(pip(full, "list", "--format", "json"))
    installed = {canonicalize_name(d["name"]): d["version"] for d in listed if d["name"] != "policylib"}
    assert len(installed) > 40
    assert {name: pins.get(name) for name in installed} == installed


# --- the server's install (its image's) -----------------------------------------------------------------------

def test_the_servers_install_serves_and_names_what_it_leaves_out(server: Path, tmp_path: Path):
    """Rule L6."""
    installed = distributions(server)
    assert not {"numpy", "kubernetes-validate", "aiohttp"} & installed
    assert SERVER_DISTRIBUTIONS | {"policylib", "pyyaml", "jsonschema", "shtab"} <= installed
    probe = ("import importlib, json, pkgutil, sys, webhook\n"
             "for m in pkgutil.walk_packages(webhook.__path__, 'webhook.'):\n    importlib.import_module(m.name)\n"
             "import policylib.shell.kube\nfrom kubernetes import client, config, watch\n"
             "print(json.dumps(sorted(sys.modules)))\n")
    loaded = set(json.loads(ok(server, "-c", probe, cwd=server.parent, env=offline(server))))
    assert "webhook.controller.reconciler" in loaded
    assert {m for m in loaded if m.split(".")[0] in ("numpy", "kubernetes_validate", "aiohttp")} == set()
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    answer, code, stderr = answer_a_review([str(server), "-m", "webhook", "run-local", "--cert-dir", str(tmp_path / "certs"),
                                            "--port", str(port)], tmp_path / "certs" / "ca.crt", port, cwd=tmp_path,
                                           env=dict(os.environ, **offline(server)))
    assert answer is not None, f"run-local did not answer within 90 s:\n{stderr}"
    assert answer["response"]["allowed"] is True and answer["response"]["patch"] and code == 0, stderr
    examples = REPO / "docs" / "examples"
    for command, package, argv in (
            ("simulate", "numpy", ["-f", examples / "llm-and-web.yaml", "--nodes", examples / "gpu-cluster-nodes.yaml"]),
            ("check", "numpy", ["--nodes", examples / "gpu-cluster-nodes.yaml", "-f", examples / "llm-and-web.yaml"]),
            ("preview", "kubernetes-validate", ["-f", examples / "web.yaml"])):
        out = run(server.parent / "policylib", command, *argv, env=offline(server))
        assert (out.returncode, out.stdout, out.stderr) == (
            2, "", f"policylib: error: {command} needs {package}, which this install of policylib leaves out: "
                   "pip install policylib\n")
    plan = run(server.parent / "policylib", "plan", "-f", examples / "snapshot.yaml", env=offline(server))
    assert plan.returncode == 0 and "would roll" in plan.stdout, plan.stderr

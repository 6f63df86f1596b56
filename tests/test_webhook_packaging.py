"""What the image installs: the gunicorn release server.py is written for, and pinned versions.

webhook/server.py subclasses gunicorn's gthread worker and uses internals of the 27 series
(``gthread._DEFER``, the ``control_socket_disable`` and ``http_protocols`` settings), so
setup.cfg allows that series only. The Dockerfile installs exactly constraints.txt.
"""
from __future__ import annotations

import configparser
import importlib.metadata
import re
import tomllib

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.helpers import REPO


def install_requires() -> list[Requirement]:
    setup = configparser.ConfigParser()
    setup.read(REPO / "setup.cfg")
    return [Requirement(line) for line in setup["options"]["install_requires"].split("\n") if line.strip()]


def build_requires() -> list[Requirement]:
    return [Requirement(r) for r in tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]]


def constraints() -> dict[str, Version]:
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact pin"
            pins[canonicalize_name(name)] = Version(version)
    return pins


def test_gunicorn_is_the_release_series_server_py_is_written_for():
    (gunicorn,) = [r for r in install_requires() if r.name == "gunicorn"]
    assert gunicorn.specifier == SpecifierSet(">=27,<28")
    assert Version(importlib.metadata.version("gunicorn")) in gunicorn.specifier
    from gunicorn.config import KNOWN_SETTINGS
    from gunicorn.workers import gthread
    assert isinstance(gthread._DEFER, object) and hasattr(gthread.ThreadWorker, "finish_request")
    assert {"control_socket_disable", "http_protocols"} <= {s.name for s in KNOWN_SETTINGS}


def test_every_requirement_and_the_build_backend_are_pinned_inside_their_range():
    pins = constraints()
    for requirement in install_requires() + build_requires():
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} is not pinned in constraints.txt"
        assert pins[name] in requirement.specifier, f"constraints.txt pins {name}=={pins[name]}: not {requirement}"


def test_the_dockerfile_installs_exactly_the_constraints_on_a_fixed_python():
    dockerfile = (REPO / "Dockerfile").read_text()
    assert re.search(r"^COPY .*\bconstraints\.txt\b", dockerfile, re.M)
    (run,) = [line for line in dockerfile.splitlines() if "pip install" in line]
    assert "PIP_CONSTRAINT=/src/constraints.txt" in run and "PIP_BUILD_CONSTRAINT=/src/constraints.txt" in run
    (image,) = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", dockerfile, re.M)
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?", image)
    assert re.search(r"^FROM \$\{PYTHON_IMAGE\}$", dockerfile, re.M)

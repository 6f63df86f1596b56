"""What the server installs: gunicorn and gevent through their public names only, and pinned versions.

webhook/admission/worker.py extends gunicorn's stock gevent worker through its public methods and settings,
so setup.cfg sets no upper bound on gunicorn. The Dockerfile installs exactly constraints.txt's versions, hash-checked
(requirements/image.txt; tests/test_image.py compares it with make image's archive).
"""
from __future__ import annotations

import ast
import configparser
import os
import re
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.helpers import REPO


def _requirements(text: str) -> list[Requirement]:
    return [Requirement(line) for line in text.split("\n") if line.strip() and not line.strip().startswith("#")]


def install_requires() -> list[Requirement]:
    """What ``pip install 'policylib[webhook]'`` asks for: the base requirements and the webhook extra's."""
    setup = configparser.ConfigParser()
    setup.read(REPO / "setup.cfg")
    return _requirements(setup["options"]["install_requires"]) + _requirements(setup["options.extras_require"]["webhook"])


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


def test_the_server_uses_no_private_name_of_gunicorn_or_gevent_and_gunicorn_has_no_upper_pin():
    (gunicorn,) = [r for r in install_requires() if r.name == "gunicorn"]
    assert gunicorn.specifier == SpecifierSet(">=27")
    users, private = [], []
    for path in sorted((REPO / "webhook" / "admission").glob("*.py")):
        tree = ast.parse(path.read_text())
        imported = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("gunicorn", "gevent"):
                imported.update({alias.asname or alias.name: f"{node.module}.{alias.name}" for alias in node.names})
            elif isinstance(node, ast.Import):
                imported.update({alias.name: alias.name for alias in node.names
                                 if alias.name.split(".")[0] in ("gunicorn", "gevent")})
        users += [path.name] if imported else []
        private += [p for p in imported.values() if any(part.startswith("_") for part in p.split("."))]
        private += [f"{node.value.id}.{node.attr}" for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name) and node.value.id in imported and node.attr.startswith("_")]
    assert {"server.py", "worker.py", "deadline.py", "connections.py", "tlsqueue.py"} <= set(users), \
        "the server's modules no longer import gunicorn or gevent: update this test"
    assert private == []
    from gunicorn.config import KNOWN_SETTINGS
    assert {"control_socket_disable", "http_protocols", "worker_connections"} <= {s.name for s in KNOWN_SETTINGS}


def test_every_requirement_and_the_build_backend_are_pinned_inside_their_range():
    pins = constraints()
    assert install_requires() and build_requires()
    for requirement in install_requires() + build_requires():
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} is not pinned in constraints.txt"
        assert pins[name] in requirement.specifier, f"constraints.txt pins {name}=={pins[name]}: not {requirement}"


@pytest.mark.skipif(os.environ.get("POLICYLIB_UNPINNED") == "1",
                    reason="make test-latest: the newest releases setup.cfg allows, deliberately not the pins")
def test_every_installed_distribution_is_at_its_pin():
    """One resolution for everything: what the suite runs with is constraints.txt exactly, direct and transitive
    (pip itself excepted: the virtualenv's own), so a new release on PyPI changes nothing until the pins move."""
    from importlib import metadata
    pins = constraints()
    installed = {canonicalize_name(d.metadata["Name"]): Version(d.version) for d in metadata.distributions()}
    assert len(installed) > 50
    wrong = {name: (str(version), str(pins.get(name, "not pinned"))) for name, version in sorted(installed.items())
             if name not in ("pip", "policylib") and pins.get(name) != version}
    assert wrong == {}, "installed (version, pin); make install installs the pins, make constraints moves them"


def test_make_installs_with_the_pins_and_every_requirement_resolves_inside_them():
    makefile = (REPO / "Makefile").read_text()
    (pin,) = re.findall(r"^PIN := (.*)$", makefile, re.M)
    assert pin.split() == ["PIP_CONSTRAINT=$(CURDIR)/constraints.txt", "PIP_BUILD_CONSTRAINT=$(CURDIR)/constraints.txt"]
    (install,) = [line for line in makefile.splitlines() if "pip install" in line and "-e '.[test]'" in line
                  and "$(BIN)" in line]
    assert install.strip().startswith("$(PIN) ")
    stamp = re.search(r"^\$\(STAMP\): (.*)$", makefile, re.M)
    assert stamp and "constraints.txt" in stamp.group(1).split()
    setup = configparser.ConfigParser()
    setup.read(REPO / "setup.cfg")
    pins = constraints()
    for requirement in _requirements(setup["options.extras_require"]["test"]):
        name = canonicalize_name(requirement.name)
        if name != "policylib":
            assert name in pins and pins[name] in requirement.specifier, f"{requirement}: pinned {pins.get(name)}"


def test_the_dockerfile_installs_exactly_the_pins_hash_checked_on_debian_13():
    dockerfile = (REPO / "Dockerfile").read_text()
    assert re.search(r"^COPY requirements \./requirements$", dockerfile, re.M)
    assert "-r requirements/image.txt" in dockerfile and "-r requirements/build.txt" in dockerfile
    assert dockerfile.count("pip install --require-hashes --no-deps") == 2
    (image,) = re.findall(r"^ARG DEBIAN_IMAGE=(\S+)$", dockerfile, re.M)
    assert re.fullmatch(r"debian:trixie-slim(@sha256:[0-9a-f]{64})?", image)
    assert "docker build --build-arg DEBIAN_IMAGE=debian:trixie-slim@sha256:" in dockerfile   # how to pin the digest
    assert re.findall(r"^FROM (.+)$", dockerfile, re.M) == ["${DEBIAN_IMAGE} AS build", "${DEBIAN_IMAGE}"]


# --- the sample AdmissionReviews: packaged, and each shows its family at work ----------------------

SAMPLES_DIR = REPO / "webhook" / "samples"
SAMPLE_FILES = sorted(p.name for p in SAMPLES_DIR.glob("*.json"))


def test_every_sample_is_package_data_and_found_through_importlib_resources():
    import fnmatch
    from importlib import resources

    from webhook.__main__ import SAMPLES
    setup = configparser.ConfigParser()
    setup.read(REPO / "setup.cfg")
    patterns = setup["options.package_data"]["webhook"].split()
    assert SAMPLE_FILES
    for name in SAMPLE_FILES:
        assert any(fnmatch.fnmatch(f"samples/{name}", p) for p in patterns), f"{name} is not package data"
        assert (resources.files("webhook") / "samples" / name).is_file()
    assert {name for _, name in SAMPLES} <= set(SAMPLE_FILES)


def test_each_sample_posted_to_the_app_with_the_default_config_answers_with_a_patch():
    import json

    import webhook
    from tests.webhook_support import patch_of
    client = webhook.create_app(None, review_log=lambda line: None).test_client()
    kinds = set()
    for name in SAMPLE_FILES:
        review = json.loads((SAMPLES_DIR / name).read_text())
        answer = client.post("/mutate", data=json.dumps(review), content_type="application/json")
        assert answer.status_code == 200, (name, answer.data)
        response = answer.get_json()["response"]
        assert response["allowed"] is True and response["uid"] == review["request"]["uid"], name
        assert patch_of(response), f"{name}: the default config changes nothing"
        kinds.add(review["request"]["kind"]["kind"])
    assert {"Deployment", "Job", "TFJob"} <= kinds


def test_run_local_banner_has_a_curl_for_each_family(tmp_path):
    from webhook.__main__ import SAMPLES, run_local_banner
    banner = run_local_banner(str(tmp_path), "127.0.0.1", 8443)
    curls = [line.strip() for line in banner.splitlines() if line.strip().startswith("curl ")]
    assert [c.split("--data-binary @", 1)[1].split()[0].rsplit("/", 1)[1] for c in curls] == \
        [name for _, name in SAMPLES] == ["deployment-create.json", "volcano-job-create.json", "tfjob-create.json"]
    # the CA as it reads from here: relative when the directory is below the working directory (make test's
    # --basetemp is), whole otherwise
    ca = tmp_path / "ca.crt"
    shown = str(ca.relative_to(Path.cwd())) if ca.is_relative_to(Path.cwd()) else str(ca)
    assert all(c.endswith("https://127.0.0.1:8443/mutate") and f"--cacert {shown} " in c for c in curls)

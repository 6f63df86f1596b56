"""The image ``make image`` builds without a registry (dist/policylib-webhook-VERSION.tar) agrees with the
``Dockerfile`` users build with a registry: user, working directory, entrypoint, command, exposed port, and the
Python packages installed at exactly constraints.txt's versions; its tag is the project's version, never latest.
"""
from __future__ import annotations

import configparser
import json
import os
import re
import tarfile
from email.parser import Parser

import pytest
from packaging.utils import canonicalize_name

from tests.helpers import REPO

SETUP = configparser.ConfigParser()
SETUP.read(REPO / "setup.cfg")
VERSION = SETUP["metadata"]["version"]
ARCHIVE = REPO / "dist" / f"policylib-webhook-{VERSION}.tar"
SITE = "usr/local/lib/python3.11/dist-packages/"


@pytest.fixture(scope="module")
def image():
    if not ARCHIVE.is_file():
        if os.geteuid() != 0:
            pytest.skip(f"{ARCHIVE.relative_to(REPO)} is absent and `make image` (mmdebstrap) needs root here")
        pytest.fail(f"{ARCHIVE.relative_to(REPO)} missing: `make image` builds it (`make test` builds it first where "
                    "make runs as root)", pytrace=False)
    with tarfile.open(ARCHIVE) as tar:
        docker = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        index = json.loads(tar.extractfile("index.json").read())  # type: ignore[union-attr]
        config = json.loads(tar.extractfile(docker[0]["Config"]).read())  # type: ignore[union-attr]
        layer = tar.extractfile(docker[0]["Layers"][0])
        assert layer is not None
        with tarfile.open(fileobj=layer, mode="r|") as rootfs:
            members = {}
            metadata = {}
            for m in rootfs:
                members[m.name] = m
                if m.name.startswith(SITE) and m.name.endswith(".dist-info/METADATA"):
                    f = rootfs.extractfile(m)
                    assert f is not None
                    metadata[m.name] = Parser().parsestr(f.read().decode())
    return {"docker": docker, "index": index, "config": config, "members": members, "metadata": metadata}


def dockerfile(instruction: str) -> str:
    """The argument of the Dockerfile's (last) ``instruction``."""
    found = re.findall(rf"^{instruction}\s+(.+)$", (REPO / "Dockerfile").read_text(), re.M)
    assert found, instruction
    return found[-1].strip()


def test_the_tag_is_the_version_never_latest(image):
    assert image["docker"][0]["RepoTags"] == [f"policylib-webhook:{VERSION}"]
    annotations = image["index"]["manifests"][0]["annotations"]
    assert annotations["io.containerd.image.name"] == f"docker.io/library/policylib-webhook:{VERSION}"
    assert VERSION != "latest"


def test_user_entrypoint_command_port_and_workdir_are_the_dockerfiles(image):
    config = image["config"]["config"]
    assert config["User"] == dockerfile("USER") == "65532:65532"
    assert config["Entrypoint"] == json.loads(dockerfile("ENTRYPOINT")) == ["python", "-m", "webhook"]
    assert config["Cmd"] == json.loads(dockerfile("CMD"))
    assert set(config["ExposedPorts"]) == {f"{dockerfile('EXPOSE')}/tcp"} == {"8443/tcp"}
    assert config["WorkingDir"] == dockerfile("WORKDIR") == "/"
    env = dict(e.split("=", 1) for e in config["Env"])
    assert env["PYTHONDONTWRITEBYTECODE"] == "1" and env["PYTHONUNBUFFERED"] == "1"


def test_the_entrypoint_resolves_to_python_3_11(image):
    members = image["members"]
    assert members["usr/bin/python"].issym() and members["usr/bin/python"].linkname == "python3"
    assert "usr/bin/python3.11" in members


def test_the_root_filesystem_is_not_writable_by_the_user(image):
    """Everything is root's: the non-root user writes nowhere but the volumes the manifests mount (/tmp)."""
    assert {(m.uid, m.gid) for m in image["members"].values()} == {(0, 0)}


def test_installed_packages_are_exactly_the_constraints(image):
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[canonicalize_name(name.split("[")[0])] = version.split(";")[0].strip()
    installed = {canonicalize_name(m["Name"]): m["Version"] for m in image["metadata"].values()}
    assert installed.pop("policylib") == VERSION
    assert installed, "no package found in the image"
    unpinned = {n: v for n, v in installed.items() if n not in pins}
    assert unpinned == {}, "installed in the image but not pinned in constraints.txt"
    assert {n: v for n, v in installed.items() if pins[n] != v} == {}
    for requirement in SETUP["options"]["install_requires"].split("\n"):
        if requirement.strip():
            name = canonicalize_name(re.split(r"[<>=!~;\[ ]", requirement.strip(), maxsplit=1)[0])
            assert name in installed, f"setup.cfg requires {name}; the image lacks it"

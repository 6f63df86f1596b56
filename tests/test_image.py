"""The image ``make image`` builds without a registry (dist/policylib-webhook-VERSION.tar) agrees with the
``Dockerfile`` users build with a registry: user, working directory, entrypoint, command, exposed port, Debian release
and packages, the Python packages of requirements/image.txt at exactly constraints.txt's versions, and the same two
scripts finishing them; its tag is the project's version, never latest. It holds the server's install and nothing
else (docs/install.md, "What the image holds"), and where this runs as root the image's own interpreter runs the
server in it, every deprecation an error.
"""
from __future__ import annotations

import configparser
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.helpers import LAUNCH, REPO, answer_a_review

sys.path.insert(0, str(REPO / "tools"))
import image_debian  # noqa: E402
import image_requirements  # noqa: E402
import image_site  # noqa: E402

SETUP = configparser.ConfigParser()
SETUP.read(REPO / "setup.cfg")
VERSION = SETUP["metadata"]["version"]
ARCHIVE = REPO / "dist" / f"policylib-webhook-{VERSION}.tar"
MAKEFILE = (REPO / "Makefile").read_text()
DOCKERFILE = (REPO / "Dockerfile").read_text()
SITE = "usr/local/lib/python3.13/dist-packages/"
STDLIB = "usr/lib/python3.13/"
#: What the image leaves out of pip install 'policylib[webhook]' (tools/image_requirements.py), as importable names.
LEFT_OUT_MODULES = ("numpy", "kubernetes_validate", "aiohttp", "aiohttp_retry", "kubernetes.aio")


@pytest.fixture(scope="module")
def image():
    if not ARCHIVE.is_file():
        if os.geteuid() != 0:
            pytest.skip(f"{ARCHIVE.relative_to(REPO)} is absent and `make image` (mmdebstrap) needs root here")
        pytest.fail(f"{ARCHIVE.relative_to(REPO)} missing: `make image` builds it (`make test` builds it first where "
                    "make runs as root)", pytrace=False)
    keep = re.compile(rf"^{re.escape(SITE)}[^/]+\.dist-info/(METADATA|RECORD)$|^var/lib/dpkg/status$|^etc/os-release$"
                      rf"|^usr/lib/os-release$|^{re.escape(SITE)}.*\.pyc$|^{re.escape(STDLIB)}.*\.pyc$")
    with tarfile.open(ARCHIVE) as tar:
        docker = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        index = json.loads(tar.extractfile("index.json").read())  # type: ignore[union-attr]
        config = json.loads(tar.extractfile(docker[0]["Config"]).read())  # type: ignore[union-attr]
        layer = tar.extractfile(docker[0]["Layers"][0])
        assert layer is not None
        with tarfile.open(fileobj=layer, mode="r|") as rootfs:
            members, files = {}, {}
            for m in rootfs:
                members[m.name] = m
                if m.isreg() and keep.match(m.name):
                    f = rootfs.extractfile(m)
                    assert f is not None
                    files[m.name] = f.read(16) if m.name.endswith(".pyc") else f.read()
    metadata = {name: Parser().parsestr(data.decode()) for name, data in files.items() if name.endswith("/METADATA")}
    return {"docker": docker, "index": index, "config": config, "members": members, "files": files,
            "metadata": metadata, "size": ARCHIVE.stat().st_size}


def dockerfile(instruction: str) -> str:
    """The argument of the Dockerfile's (last) ``instruction``."""
    found = re.findall(rf"^{instruction}\s+(.+)$", DOCKERFILE, re.M)
    assert found, instruction
    return found[-1].strip()


def runs() -> list[str]:
    """The Dockerfile's RUN instructions, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", "\n".join(line for line in DOCKERFILE.splitlines() if not line.lstrip().startswith("#")))
    return [" ".join(line[4:].split()) for line in joined.splitlines() if line.startswith("RUN ")]


def make_variable(name: str) -> str:
    (value,) = re.findall(rf"^{name}\s*:?=\s*(.*)$", MAKEFILE, re.M)
    return value.strip()


def installed(image) -> dict[str, str]:
    return {canonicalize_name(m["Name"]): m["Version"] for m in image["metadata"].values()}


# --- the image's settings: the Dockerfile's ---------------------------------------------------------------

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


def test_the_root_filesystem_is_not_writable_by_the_user(image):
    """Everything is root's: the non-root user writes nowhere but the volumes the manifests mount (/tmp)."""
    assert {(m.uid, m.gid) for m in image["members"].values()} == {(0, 0)}


def test_the_image_is_at_most_200_mib(image):
    """docs/figures.md, "The image": 532 MiB before the image held the server's install alone."""
    assert image["size"] <= 200 * 2**20, f"{image['size'] / 2**20:.0f} MiB"


# --- Debian: one release, one interpreter, the packages the server runs ----------------------------------

def test_make_image_and_the_dockerfile_are_on_debian_13_and_its_python_3_13(image):
    os_release = dict(re.findall(r'^(\w+)="?([^"\n]*)"?$', image["files"]["usr/lib/os-release"].decode(), re.M))
    assert os_release["VERSION_CODENAME"] == make_variable("DEBIAN_SUITE") == "trixie"
    (base,) = re.findall(r"^ARG DEBIAN_IMAGE=(\S+)$", DOCKERFILE, re.M)
    assert re.fullmatch(r"debian:trixie-slim(@sha256:[0-9a-f]{64})?", base)
    assert re.findall(r"^FROM (.+)$", DOCKERFILE, re.M) == ["${DEBIAN_IMAGE} AS build", "${DEBIAN_IMAGE}"]
    assert "--variant=minbase" in MAKEFILE   # debian:trixie-slim's variant
    members = image["members"]
    assert members["usr/bin/python"].issym() and members["usr/bin/python"].linkname == "python3"
    assert members["usr/bin/python3"].linkname == "python3.13" and "usr/bin/python3.13" in members
    assert make_variable("IMAGE_SITE") + "/" == SITE
    assert DOCKERFILE.count("/" + SITE.rstrip("/")) == 4   # pip's --target, image_site.py, and COPY's two paths


def test_both_install_the_same_debian_packages_and_remove_the_same_ones():
    (final,) = [run for run in runs() if "image_debian.py" in run]
    (apt_get,) = re.findall(r"apt-get install -y --no-install-recommends ([^&]*?) *&&", final)
    assert apt_get.split() == make_variable("IMAGE_DEBIAN_PACKAGES").split(",") == \
        ["python3", "python-is-python3", "libstdc++6"]
    assert "customize-hook='chroot \"$$1\" python3 /tmp/image_debian.py'" in MAKEFILE
    assert "source=tools/image_debian.py,target=/tmp/image_debian.py" in DOCKERFILE
    assert "&& python3 /tmp/image_debian.py &&" in final


def test_what_the_dockerfile_reads_is_in_its_build_context():
    """Every COPY source and the bind-mounted script pass .dockerignore; the harness's binaries (e2e/), build/ and
    dist/ stay out of the context."""
    import fnmatch
    ignored = [p.strip() for p in (REPO / ".dockerignore").read_text().splitlines() if p.strip()]
    sources = [s for line in re.findall(r"^COPY (?!--from)(.+) \S+$", DOCKERFILE, re.M) for s in line.split()]
    sources += re.findall(r"--mount=type=bind,source=(\S+?),", DOCKERFILE)
    assert {"requirements", "policylib", "webhook", "tools/image_site.py", "tools/image_debian.py"} <= set(sources)
    for source in sources:
        assert (REPO / source).exists(), source
        assert not [p for p in ignored if fnmatch.fnmatch(source, p) or fnmatch.fnmatch(source.split("/")[0], p)], source
    assert {"e2e", "build", "dist"} <= set(ignored)


def status(image) -> dict[str, dict[str, str]]:
    return image_debian.installed(image["files"]["var/lib/dpkg/status"].decode())


def test_the_debian_packages_are_what_the_server_runs_and_what_they_depend_on(image):
    packages = status(image)
    assert set(packages) == image_debian.kept(packages)
    assert {"python3.13", "libssl3t64", "libstdc++6", "coreutils", "dash", "dpkg", "tzdata"} <= set(packages)
    assert not {"apt", "perl-base", "bash", "util-linux", "login", "passwd", "mount", "sed", "grep"} & set(packages)
    members = image["members"]
    assert "usr/bin/sleep" in members and "usr/bin/sh" in members   # the preStop hook's `sleep 5`, kubectl exec
    assert "usr/bin/apt-get" not in members and "usr/bin/perl" not in members


def test_every_kept_debian_package_has_its_dependencies(image):
    """dpkg's database stays consistent (what vulnerability scanners read): every Depends and Pre-Depends of an
    installed package is installed, or provided by one."""
    packages = status(image)
    provided = {item.split()[0] for fields in packages.values()
                for item in filter(None, re.split(r"\s*,\s*", fields.get("Provides", "")))}
    missing = []
    for name, fields in packages.items():
        for field in ("Pre-Depends", "Depends"):
            for alternatives in filter(None, re.split(r"\s*,\s*", fields.get(field, ""))):
                names = [a.strip().split()[0].split(":")[0] for a in alternatives.split("|")]
                if not any(n in packages or n in provided for n in names):
                    missing.append(f"{name} {field}: {alternatives}")
    assert missing == []


# --- Python: requirements/image.txt, hash-checked, finished by tools/image_site.py --------------------------

def test_the_hashed_requirements_match_setup_cfg_pyproject_and_the_pins():
    """`make image-requirements` wrote them from the files they name; a pin moved or a requirement added since fails
    here until it is run again."""
    assert image_requirements.differences() == []
    pins = image_requirements.constraints()
    for path in (image_requirements.IMAGE, image_requirements.BUILD):
        entries = image_requirements.parse(path.read_text())
        assert entries
        for name, (version, hashes) in entries.items():
            assert pins[name] == version, (path.name, name)
            assert hashes and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), (path.name, name)


def test_what_the_image_leaves_out_is_the_base_installs_numpy_and_kubernetes_validate_and_the_asyncio_client():
    image_txt = image_requirements.parse(image_requirements.IMAGE.read_text())
    assert image_requirements.LEFT_OUT == (("policylib", "numpy"), ("policylib", "kubernetes-validate"),
                                           ("kubernetes", "aiohttp"), ("kubernetes", "aiohttp-retry"))
    assert not {"numpy", "kubernetes-validate", "aiohttp", "aiohttp-retry", "yarl", "multidict"} & set(image_txt)
    assert {"flask", "gunicorn", "gevent", "cryptography", "kubernetes", "prometheus-client", "orjson", "httptools",
            "pyyaml", "jsonschema", "shtab"} <= set(image_txt)
    assert image_site.REMOVED == ("kubernetes/aio", "bin", "include")


def test_both_install_requirements_image_txt_hash_checked_and_run_image_site_py():
    (build,) = [run for run in runs() if "-r requirements/image.txt" in run]
    steps = build.split(" && ")
    (install,) = [step for step in steps if "-r requirements/image.txt" in step]
    assert {"--require-hashes", "--no-deps", "--only-binary=:all:", "--no-compile"} <= set(install.split())
    (backend,) = [step for step in steps if "-r requirements/build.txt" in step]
    assert {"--require-hashes", "--no-deps"} <= set(backend.split())
    assert any("--no-build-isolation" in step for step in steps)
    assert steps[-1] == "python3 tools/image_site.py /usr/local/lib/python3.13/dist-packages"
    assert "tools/image_requirements.py --install build/image/rootfs/$(IMAGE_SITE)" in MAKEFILE
    assert "python3 /tmp/image_site.py /$(IMAGE_SITE)" in MAKEFILE
    assert '"--require-hashes", "--no-deps"' in (REPO / "tools" / "image_requirements.py").read_text()


def test_installed_packages_are_exactly_the_hashed_requirements_at_the_pins(image):
    found = installed(image)
    assert found.pop("policylib") == VERSION
    listed = {name: version for name, (version, _) in image_requirements.parse(image_requirements.IMAGE.read_text()).items()}
    assert found == listed
    pins = image_requirements.constraints()
    assert {n: v for n, v in found.items() if pins.get(n) != v} == {}


def test_every_requirement_in_the_image_is_met_but_what_it_leaves_out(image):
    """``pip check`` for the image's Python: each installed distribution's requirements (markers evaluated for
    Python 3.13 on Linux) are installed inside their ranges, except the pairs the image leaves out."""
    found = {n: Version(v) for n, v in installed(image).items()}
    env = image_requirements.environment()
    leaves_out = {(canonicalize_name(a), canonicalize_name(b)) for a, b in image_requirements.LEFT_OUT}
    unmet, left_out = [], set()
    for meta in image["metadata"].values():
        name = canonicalize_name(meta["Name"])
        for line in meta.get_all("Requires-Dist") or []:
            requirement = Requirement(line)
            if requirement.marker is not None and not requirement.marker.evaluate({**env, "extra": ""}):
                continue
            wanted = canonicalize_name(requirement.name)
            if wanted not in found and (name, wanted) in leaves_out:
                left_out.add((name, wanted))
            elif wanted not in found:
                unmet.append(f"{name} requires {requirement}: not installed")
            elif not requirement.specifier.contains(found[wanted], prereleases=True):
                unmet.append(f"{name} requires {requirement}: {found[wanted]} installed")
    assert unmet == []
    assert left_out == leaves_out
    assert Marker('python_version == "3.13"').evaluate(env)


def records(image) -> dict[str, str]:
    """Every file the image's distributions record: {path under the site: distribution}."""
    out = {}
    for name, data in image["files"].items():
        if name.endswith("/RECORD"):
            for row in csv.reader(io.StringIO(data.decode())):
                if row:
                    out[SITE + image_site.recorded(row[0])] = name[len(SITE):].split("/")[0]
    return out


def test_the_site_holds_exactly_what_its_distributions_record_and_their_bytecode(image):
    """Nothing removed but what tools/image_site.py says (its RECORD lines with it), nothing added but bytecode."""
    recorded = records(image)
    files = {n for n, m in image["members"].items() if n.startswith(SITE) and not m.isdir()}
    assert sorted(p for p in recorded if p not in files) == []
    assert sorted(f for f in files - set(recorded) if "/__pycache__/" not in f) == []
    for removed in image_site.REMOVED:
        assert not any(f.startswith(SITE + removed + "/") for f in files | set(recorded)), removed
    assert not [f for f in files | set(recorded) if f.endswith(".dist-info/direct_url.json")]


def pyc(source: str) -> str:
    directory, _, module = source.rpartition("/")
    return f"{directory}/__pycache__/{module[:-3]}.cpython-313.pyc"


def test_the_bytecode_is_the_image_pythons_hash_checked_and_skips_only_the_generated_client(image):
    """Compiled ahead by the image's own python3.13, hash-checked (flags 0b11: valid though the archive sets every
    mtime to 0, where Debian's timestamped bytecode would be stale and every module compiled again at each start),
    the standard library's too, for every module but the kubernetes client's generated API classes and models."""
    members = image["members"]
    sources = [n for n, m in members.items() if n.startswith(SITE) and n.endswith(".py") and m.isreg()]
    skipped = re.compile("^" + re.escape(SITE) + "(" + "|".join(map(re.escape, image_site.NOT_COMPILED)) +
                         r")/(?!__init__\.py$)")
    missing = [s for s in sources if not skipped.match(s) and pyc(s) not in members]
    unexpected = [s for s in sources if skipped.match(s) and pyc(s) in members]
    assert missing == [] and unexpected == []
    assert len(sources) > 2000
    headers = {name: data for name, data in image["files"].items() if name.endswith(".pyc")}
    assert len([n for n in headers if n.startswith(STDLIB)]) > 500   # the standard library's, by tools/image_debian.py
    assert len({data[:4] for data in headers.values()}) == 1   # one interpreter's magic number
    assert {name for name, data in headers.items() if int.from_bytes(data[4:8], "little") != 0b11} == set()
    assert not [n for n in headers if "cpython-313" not in n]


# --- the image's own interpreter runs the server (root: a chroot of the image) ----------------------------



@pytest.fixture(scope="module")
def rootfs(image, tmp_path_factory):
    """The image's root filesystem, unpacked (root only: its files are root's, and the interpreter runs chrooted)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("running the image's interpreter needs root (chroot) and unshare")
    where = tmp_path_factory.mktemp("image-rootfs")
    where.chmod(0o755)   # the image's /, which the user must traverse
    with tarfile.open(ARCHIVE) as tar:
        layer = tar.extractfile(image["docker"][0]["Layers"][0])
        with tarfile.open(fileobj=layer, mode="r|") as rootfs:
            rootfs.extractall(where, filter="fully_trusted")   # our own archive; /tmp keeps its mode 1777
    (where / "tmp" / "launch.py").write_text(LAUNCH)
    return where


def in_image(rootfs: Path, image, *argv: str, env: tuple[str, ...] = (),
             python: tuple[str, ...] = ("python", "/tmp/launch.py")) -> list[str]:
    """``python -m argv`` as the image runs it (its user, environment and working directory), every deprecation an
    error: the image's interpreter in its own mount namespace rooted at the unpacked image, with a /proc (the network
    and the PIDs are this machine's: the process is unshare's, exec'd, so a SIGTERM reaches it), no kubeconfig;
    ``env``: more ``NAME=value``."""
    config = image["config"]["config"]
    uid, gid = config["User"].split(":")
    return ["unshare", "--mount", f"--root={rootfs}", "--mount-proc", f"--wd={config['WorkingDir']}",
            f"--setuid={uid}", f"--setgid={gid}", "env", "-i", *config["Env"], "HOME=/tmp",
            "KUBECONFIG=/tmp/no-kubeconfig", *env, *python, *argv]


def run_in_image(rootfs: Path, image, *argv: str, env: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run(in_image(rootfs, image, *argv, env=env), capture_output=True, text=True, timeout=120)


def test_the_launcher_in_the_image_turns_a_deprecation_into_an_error(rootfs, image):
    (rootfs / "tmp" / "warned.py").write_text("import warnings\nwarnings.warn('from a module run', DeprecationWarning)\n")
    out = run_in_image(rootfs, image, "warned", env=("PYTHONPATH=/tmp",))
    assert out.returncode == 1 and "DeprecationWarning: from a module run" in out.stderr, out.stderr


def test_the_servers_commands_in_the_image_print_no_warning(rootfs, image):
    help_ = run_in_image(rootfs, image, "webhook", "--help")
    assert (help_.returncode, help_.stderr) == (0, "") and "controller" in help_.stdout
    certs = run_in_image(rootfs, image, "webhook", "certs", "--out", "/tmp/certs", "--local")
    assert certs.returncode == 0 and certs.stderr.startswith("/tmp/certs: new CA and serving certificate (") \
        and certs.stderr.count("\n") == 1, certs.stderr
    for argv in (("serve", "--cert-dir", "/tmp/none"), ("controller",)):
        out = run_in_image(rootfs, image, "webhook", *argv)
        assert out.returncode == 2 and out.stderr.count("\n") == 1 and out.stderr.startswith("webhook: error: "), \
            out.stderr


def test_the_server_and_the_controller_import_nothing_the_image_leaves_out(rootfs, image):
    probe = ("import importlib, json, pkgutil, sys, webhook\n"
             "for m in pkgutil.walk_packages(webhook.__path__, 'webhook.'):\n    importlib.import_module(m.name)\n"
             "import policylib.shell.kube\n"
             "from kubernetes import client, config, watch\n"
             "client.ApiClient(client.Configuration())\n"
             "missing = []\n"
             f"for name in {LEFT_OUT_MODULES!r}:\n"
             "    try:\n        importlib.import_module(name)\n"
             "    except ModuleNotFoundError as e:\n        missing.append(e.name)\n"
             "print(json.dumps({'loaded': sorted(sys.modules), 'missing': missing}))\n")
    (rootfs / "tmp" / "probe.py").write_text(probe)
    out = run_in_image(rootfs, image, "probe", env=("PYTHONPATH=/tmp",))
    assert out.returncode == 0 and out.stderr == "", out.stderr
    result = json.loads(out.stdout)
    assert "webhook.controller.reconciler" in result["loaded"] and "gunicorn" in result["loaded"]
    assert result["missing"] == ["numpy", "kubernetes_validate", "aiohttp", "aiohttp_retry", "kubernetes.aio"]


def test_the_server_imports_from_the_images_bytecode_never_compiling_again(rootfs, image):
    """In the unpacked archive (every mtime 0) each module the server imports is loaded from its bytecode (``python
    -v`` says "matches"), none is found stale and compiled again, as a timestamped bytecode would be."""
    out = subprocess.run(in_image(rootfs, image, "-c", "import webhook.admission.server, webhook.admission.app, "
                                  "policylib.shell.kube\nfrom kubernetes import client, config, watch",
                                  python=("python", "-v")),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert [line for line in out.stderr.splitlines() if "bytecode is stale" in line] == []
    loaded = [line for line in out.stderr.splitlines() if line.startswith("# code object from ")]
    assert len(loaded) > 500 and len([line for line in out.stderr.splitlines() if " matches " in line]) == len(loaded)


def test_the_server_in_the_image_answers_a_review_and_prints_no_warning(rootfs, image):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    answer, code, stderr = answer_a_review(in_image(rootfs, image, "webhook", "run-local", "--cert-dir", "/tmp/run",
                                                    "--port", str(port)), rootfs / "tmp" / "run" / "ca.crt", port)
    assert answer is not None, f"run-local in the image did not answer within 90 s:\n{stderr}"
    assert answer["response"]["allowed"] is True and answer["response"]["patch"]
    assert code == 0, stderr
    assert "Traceback" not in stderr and "Warning" not in stderr, stderr


def test_the_offline_commands_the_image_leaves_out_say_so_in_one_line(rootfs, image):
    """Rule L6, in the image: simulate and check need numpy, preview kubernetes-validate; plan runs."""
    examples = rootfs / "tmp" / "examples"
    shutil.copytree(REPO / "docs" / "examples", examples, dirs_exist_ok=True)
    for command, package, argv in (
            ("simulate", "numpy", ["-f", "/tmp/examples/llm-and-web.yaml", "--nodes", "/tmp/examples/gpu-cluster-nodes.yaml"]),
            ("check", "numpy", ["--nodes", "/tmp/examples/gpu-cluster-nodes.yaml", "-f", "/tmp/examples/llm-and-web.yaml"]),
            ("preview", "kubernetes-validate", ["-f", "/tmp/examples/web.yaml"])):
        out = run_in_image(rootfs, image, "policylib.cli", command, *argv)
        assert (out.returncode, out.stdout, out.stderr) == (
            2, "", f"policylib: error: {command} needs {package}, which this install of policylib leaves out: "
                   "pip install policylib\n")
    plan = run_in_image(rootfs, image, "policylib.cli", "plan", "-f", "/tmp/examples/snapshot.yaml")
    assert plan.returncode == 0 and plan.stderr == "" and "would roll" in plan.stdout, plan.stderr

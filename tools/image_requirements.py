"""The image's Python packages, each at constraints.txt's pin with the sha256 of its wheels, in two files that
``make image`` and the ``Dockerfile`` install with ``pip install --require-hashes --no-deps``:

- ``requirements/image.txt``: the server's install (docs/install.md, "What the image holds"): setup.cfg's
  ``install_requires`` and its ``webhook`` extra with every distribution they bring in, their markers evaluated for
  the image's Python (:data:`IMAGE_PYTHON` on Linux), less the requirements in :data:`LEFT_OUT`, which the server
  never imports, and what only they bring in;
- ``requirements/build.txt``: the build backend (pyproject.toml's ``build-system.requires``), which builds the
  project's own wheel in the Dockerfile's build stage.

Each distribution is pinned at constraints.txt's version; its hashes are those of the wheels ``pip download`` fetches
for that Python on Linux x86_64 and aarch64 (manylinux up to Debian 13's glibc, :data:`GLIBC`), so one file serves
``make image`` (amd64) and ``docker build`` on either architecture.

    python tools/image_requirements.py --write       # make image-requirements: downloads the wheels to hash them
    python tools/image_requirements.py --check       # offline: the files name what setup.cfg and the pins give
    python tools/image_requirements.py --install DIR WHEEL   # make image: pip install --target DIR for the image

``--check`` (and tests/test_image.py) compute the same sets from the installed distributions' metadata (``make
install`` puts every pin of constraints.txt in .venv) and compare them with the files' names and versions: a pin
moved, a requirement added to setup.cfg or a dependency a release added fails until ``make image-requirements``.
"""
from __future__ import annotations

import argparse
import configparser
import hashlib
import re
import subprocess
import sys
import tempfile
import zipfile
from email.parser import Parser
from pathlib import Path
from typing import Callable, Iterable

import tomllib
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

REPO = Path(__file__).resolve().parent.parent
IMAGE = REPO / "requirements" / "image.txt"
BUILD = REPO / "requirements" / "build.txt"
#: The image's Python: Debian 13's python3, in make image's root filesystem and the Dockerfile's.
IMAGE_PYTHON = "3.13"
#: Debian 13's glibc: the newest manylinux tag the image's Python runs.
GLIBC = (2, 41)
ARCHES = ("x86_64", "aarch64")
#: Requirements the image leaves out, as (distribution, its requirement): what only they bring in goes with them.
#: The server never imports them (tests/test_image.py runs it in the image; tests/test_distribution.py without them):
LEFT_OUT = (
    # the simulator's arrays (policylib simulate, check), imported on first use only; pip install policylib keeps it
    ("policylib", "numpy"),
    # the Kubernetes OpenAPI schemas of preview's check (rule D2), read by the CLI only; pip install policylib keeps it
    ("policylib", "kubernetes-validate"),
    # kubernetes.aio, the client's asyncio half (tools/image_site.py removes it); the server uses the synchronous one
    ("kubernetes", "aiohttp"),
    ("kubernetes", "aiohttp-retry"),
)
HEADER = """\
# {what} ({users}: pip install --require-hashes --no-deps), for Python {python} on Linux
# x86_64 and aarch64. Written by `make image-requirements` (tools/image_requirements.py) from {source} and
# constraints.txt's pins; never edited by hand: tests/test_image.py fails when it no longer matches them.
"""


def constraints(path: Path = REPO / "constraints.txt") -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version.strip()
    return pins


def server_requirements(setup_cfg: Path = REPO / "setup.cfg") -> list[Requirement]:
    """setup.cfg's base requirements and webhook extra: what ``pip install 'policylib[webhook]'`` asks for."""
    cfg = configparser.ConfigParser()
    cfg.read(setup_cfg)
    lines = cfg["options"]["install_requires"].splitlines() + cfg["options.extras_require"]["webhook"].splitlines()
    return [Requirement(line.strip()) for line in lines if line.strip() and not line.strip().startswith("#")]


def build_requirements(pyproject: Path = REPO / "pyproject.toml") -> list[Requirement]:
    return [Requirement(r) for r in tomllib.loads(pyproject.read_text())["build-system"]["requires"]]


def environment(arch: str = "x86_64") -> dict[str, str]:
    """The marker environment of the image's Python on Linux."""
    env = dict(default_environment())
    env.update(python_version=IMAGE_PYTHON, python_full_version=f"{IMAGE_PYTHON}.0", implementation_name="cpython",
               implementation_version=f"{IMAGE_PYTHON}.0", platform_python_implementation="CPython",
               os_name="posix", sys_platform="linux", platform_system="Linux", platform_machine=arch)
    return env


def closure(by: str, requirements: Iterable[Requirement], requires: Callable[[str], list[str]], pins: dict[str, str],
            env: dict[str, str], left_out: Iterable[tuple[str, str]] = ()) -> dict[str, str]:
    """Every distribution ``requirements`` (those of ``by``) bring in for ``env``, at its pin: {canonical name:
    version}, but the (distribution, requirement) pairs of ``left_out``. ``requires(name)`` is that distribution's
    Requires-Dist. A distribution without a pin, or whose pin is outside a requirement on it, is an error naming
    both."""
    skip = {(canonicalize_name(a), canonicalize_name(b)) for a, b in left_out}
    found: dict[str, str] = {}
    extras_seen: set[tuple[str, str]] = set()
    todo = [(r, canonicalize_name(by)) for r in requirements]
    while todo:
        requirement, requirer = todo.pop()
        name = canonicalize_name(requirement.name)
        if (requirer, name) in skip:
            continue
        if name not in pins:
            raise SystemExit(f"{requirer} requires {requirement}: {name} is not pinned in constraints.txt")
        if not requirement.specifier.contains(pins[name], prereleases=True):
            raise SystemExit(f"{requirer} requires {requirement}: constraints.txt pins {name}=={pins[name]}")
        extras = sorted(requirement.extras)
        new = name not in found or any((name, e) not in extras_seen for e in extras)
        found[name] = pins[name]
        if not new:
            continue
        extras_seen.update((name, e) for e in extras)
        active = [""] + sorted(e for n, e in extras_seen if n == name)
        for line in requires(name):
            dependency = Requirement(line)
            if dependency.marker is None or any(dependency.marker.evaluate({**env, "extra": e}) for e in active):
                dependency.marker = None
                todo.append((dependency, name))
    return dict(sorted(found.items()))


def installed_requires(name: str) -> list[str]:
    """Requires-Dist of an installed distribution (this interpreter's environment: .venv, at the pins)."""
    from importlib import metadata
    return metadata.requires(name) or []


def wanted(requires: Callable[[str], list[str]] = installed_requires, arch: str = "x86_64") -> dict[Path, dict[str, str]]:
    """What each file names, computed from ``requires`` (default: the installed distributions' metadata)."""
    pins = constraints()
    return {IMAGE: closure("policylib", server_requirements(), requires, pins, environment(arch), LEFT_OUT),
            BUILD: closure("pyproject.toml", build_requirements(), requires, pins, environment(arch))}


def platforms(arch: str) -> list[str]:
    """The manylinux tags a glibc of :data:`GLIBC` runs, newest first, with their legacy aliases (pip's --platform
    takes each tag literally)."""
    oldest = 5 if arch == "x86_64" else 17
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags = []
    for minor in range(GLIBC[1], oldest - 1, -1):
        tags.append(f"manylinux_{GLIBC[0]}_{minor}_{arch}")
        if minor in legacy:
            tags.append(f"{legacy[minor]}_{arch}")
    return tags


def pip_target_options(arch: str) -> list[str]:
    """pip's options for wheels of the image's Python on ``arch``, whatever Python runs pip."""
    options = ["--only-binary=:all:", "--implementation", "cp", "--python-version", IMAGE_PYTHON,
               "--abi", f"cp{IMAGE_PYTHON.replace('.', '')}"]
    for tag in platforms(arch):
        options += ["--platform", tag]
    return options


def download(requirements: list[str], arch: str, where: Path) -> dict[str, Path]:
    """``pip download`` of exact pins as wheels for the image's Python on ``arch``: {canonical name: wheel}."""
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
                    *pip_target_options(arch), "--dest", str(where), *requirements], check=True)
    wheels = {}
    for path in where.glob("*.whl"):
        name, _, _, _ = parse_wheel_filename(path.name)
        wheels[canonicalize_name(name)] = path
    return wheels


def wheel_requires(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        (meta,) = [n for n in z.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
        return Parser().parsestr(z.read(meta).decode()).get_all("Requires-Dist") or []


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def generate() -> tuple[dict[Path, str], list[str]]:
    """Downloads the wheels; returns each file's text and the wheels hashed. The sets are decided by the downloaded
    wheels' own metadata: first computed from the installed distributions', then again from the wheels (downloading
    any name they add) until nothing changes."""
    texts: dict[Path, str] = {}
    chosen: list[str] = []
    with tempfile.TemporaryDirectory(prefix="image-requirements-") as tmp:
        wheels: dict[str, dict[str, Path]] = {arch: {} for arch in ARCHES}
        found = wanted()
        while True:
            for arch in ARCHES:
                needed = sorted({f"{n}=={v}" for names in found.values() for n, v in names.items() if n not in wheels[arch]})
                if needed:
                    wheels[arch].update(download(needed, arch, Path(tmp) / arch))
            again = {arch: wanted(lambda name, a=arch: wheel_requires(wheels[a][name]) if name in wheels[a]
                                  else installed_requires(name), arch) for arch in ARCHES}
            if again["x86_64"] != again["aarch64"]:
                raise SystemExit("the image's packages differ between x86_64 and aarch64: not handled")
            if again["x86_64"] == found and all(n in wheels[a] for a in ARCHES for names in found.values() for n in names):
                break
            found = again["x86_64"]
        for path, names in found.items():
            what, users, source = (("The image's Python packages", "make image, Dockerfile", "setup.cfg (install_requires "
                                    "and the webhook extra, less tools/image_requirements.py's LEFT_OUT)") if path == IMAGE
                                   else ("The build backend of the project's wheel", "Dockerfile", "pyproject.toml"))
            out = [HEADER.format(what=what, users=users, python=IMAGE_PYTHON, source=source)]
            for name, version in names.items():
                hashes = sorted({sha256(wheels[arch][name]) for arch in ARCHES})
                out.append(f"{name}=={version} \\\n" + " \\\n".join(f"    --hash=sha256:{h}" for h in hashes) + "\n")
                chosen += sorted({f"{wheels[arch][name].name}" for arch in ARCHES})
            texts[path] = "".join(out)
    return texts, chosen


def parse(text: str) -> dict[str, tuple[str, list[str]]]:
    """A file's entries: {canonical name: (version, [sha256, ...])}."""
    entries = {}
    for entry in re.sub(r"\\\n", " ", text).splitlines():
        entry = entry.split("#", 1)[0].strip()
        if entry:
            spec, *options = entry.split()
            name, _, version = spec.partition("==")
            entries[canonicalize_name(name)] = (version, [o.removeprefix("--hash=sha256:") for o in options])
    return entries


def differences() -> list[str]:
    """How each file differs from what setup.cfg, pyproject.toml and the pins give (empty: it does not)."""
    out = []
    for path, expected in wanted().items():
        listed = {name: version for name, (version, _) in parse(path.read_text()).items()} if path.exists() else {}
        if listed != expected:
            out.append(f"{path.relative_to(REPO)}: only in the file {sorted(set(listed.items()) - set(expected.items()))}, "
                       f"missing from it {sorted(set(expected.items()) - set(listed.items()))}")
    return out


def install(target: Path, wheel: Path, arch: str = "x86_64") -> None:
    """``make image``: requirements/image.txt and the project's wheel into ``target`` for the image's Python, every
    file hash-checked (the wheel against the hash of the file just built), nothing compiled (tools/image_site.py
    compiles with the image's own interpreter)."""
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as own:
        own.write(f"policylib @ {wheel.resolve().as_uri()} --hash=sha256:{sha256(wheel)}\n")
        own.flush()
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        "--no-warn-script-location", "--no-compile", "--require-hashes", "--no-deps",
                        *pip_target_options(arch), "--target", str(target), "-r", str(IMAGE), "-r", own.name],
                       check=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--write", action="store_true", help="write both files (downloads the wheels to hash them)")
    what.add_argument("--check", action="store_true", help="exit 1 when a file differs from setup.cfg, pyproject.toml "
                                                           "and constraints.txt")
    what.add_argument("--install", nargs=2, type=Path, metavar=("DIR", "WHEEL"),
                      help="pip install --target DIR requirements/image.txt and WHEEL for the image's Python")
    args = p.parse_args(argv)
    if args.install:
        install(*args.install)
        return 0
    if args.check:
        for line in differences():
            print(f"{line}: `make image-requirements` rewrites it", file=sys.stderr)
        return 1 if differences() else 0
    texts, chosen = generate()
    for path, text in texts.items():
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        print(f"{path.relative_to(REPO)}: {len(parse(text))} distributions")
    print("wheels hashed:\n  " + "\n  ".join(chosen))
    return 0


if __name__ == "__main__":
    sys.exit(main())

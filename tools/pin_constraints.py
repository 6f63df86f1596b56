"""constraints.txt: the one resolution every install of the project uses, and how it moves on.

``make install``/``make test`` (and so CI), the image and the wheel tests install exactly these pins, so what
a contributor tests is what ships. Moving on is a deliberate step (docs/testing.md, "Dependencies"):

    python tools/pin_constraints.py --out constraints.txt   # `make constraints`: the newest release of everything
    python tools/pin_constraints.py --compare FREEZE        # `make test-latest`: what is newer than the pins

``--out`` installs ``.[test]`` and the build backend unpinned into a scratch virtualenv, whatever PyPI serves
today within setup.cfg's ranges, and writes every distribution it holds (pip itself excepted: the
virtualenv's own) as ``name==version``. ``--compare`` prints the distributions of a ``pip freeze`` whose
version differs from its pin, or that have none.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

HEADER = """\
# Exact versions of every distribution the project installs, direct and transitive: the development and
# test install (make install, make test, CI), the image (Dockerfile and make image: PIP_CONSTRAINT) and the
# wheel tests (tests/test_distribution.py) all resolve to these, the build backend included.
# tests/test_webhook_packaging.py checks that every requirement of setup.cfg is pinned here inside its
# range and that every installed distribution is at its pin. Written by `make constraints` (the newest
# release of each, then the whole suite); never edited by hand but to hold one package back.
"""

#: Distributions a virtualenv brings itself: not the project's to pin.
NOT_PINNED = {"pip"}


def canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def parse(text: str) -> dict[str, tuple[str, str]]:
    """``{canonical name: (name as written, version)}`` of ``name==version`` lines; comments, blank lines and
    editable or URL lines are left out."""
    pins = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" not in line or line.startswith("-e"):
            continue
        name, _, version = line.partition("==")
        pins[canonical(name.strip())] = (name.strip(), version.strip())
    return pins


def newest_freeze(python: str) -> str:
    """``pip freeze`` of a scratch virtualenv holding ``.[test]`` and the build backend at their newest."""
    with tempfile.TemporaryDirectory(prefix="pin-constraints-") as scratch:
        venv = Path(scratch) / "venv"
        subprocess.run([python, "-m", "venv", venv], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
        subprocess.run([*pip, "install", "--quiet", "--upgrade", f"{ROOT}[test]", "setuptools", "wheel"], check=True)
        out = subprocess.run([*pip, "freeze", "--all"], check=True, capture_output=True, text=True).stdout
    return out


def constraints_text(freeze: str) -> str:
    pins = parse(freeze)
    lines = [f"{name}=={version}" for key, (name, version) in pins.items()
             if key not in NOT_PINNED and key != "policylib"]
    return HEADER + "\n".join(sorted(lines, key=str.lower)) + "\n"


def differences(pinned: str, freeze: str) -> list[tuple[str, str, str]]:
    """``(name, pinned version or "-", installed version)`` for each distribution of ``freeze`` not at its pin."""
    pins, found = parse(pinned), parse(freeze)
    rows = []
    for key, (name, version) in sorted(found.items()):
        if key in NOT_PINNED or key == "policylib":
            continue
        pin = pins.get(key, (name, "-"))[1]
        if pin != version:
            rows.append((name, pin, version))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--out", type=Path, help="write the newest resolution here (constraints.txt)")
    what.add_argument("--compare", type=Path, metavar="FREEZE", help="a pip freeze to compare with the pins")
    args = parser.parse_args(argv)
    if args.out:
        args.out.write_text(constraints_text(newest_freeze(sys.executable)))
        print(f"{args.out}: written; run the whole suite (make test) before committing it")
        return 0
    rows = differences((ROOT / "constraints.txt").read_text(), args.compare.read_text())
    if not rows:
        print("every distribution is at its pin in constraints.txt")
        return 0
    width = max(len(r[0]) for r in rows)
    print(f"{'DISTRIBUTION':<{width}}  PINNED  NEWEST")
    for name, pin, version in rows:
        print(f"{name:<{width}}  {pin}  {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

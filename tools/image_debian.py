"""The image's Debian packages: what the server runs, with everything it depends on; every other package of the base
removed. Run as root inside the image, by its own ``python3``, once its packages are installed: by ``make image``
(mmdebstrap's customize hook) and by the ``Dockerfile``, so both keep the same packages.

Kept (:data:`KEPT`, and every package they depend on, Depends and Pre-Depends, the first installed alternative):

- ``python3`` and ``python-is-python3``: the interpreter (``python`` is the ENTRYPOINT);
- ``libstdc++6``: the C++ runtime greenlet's manylinux wheel links (gevent's greenlets), which no Debian package of
  the interpreter brings in;
- ``coreutils``: ``sleep``, the Deployments' preStop hook (``sleep 5``); ``dash``: ``/bin/sh`` for ``kubectl exec``;
- ``dpkg``, ``base-files``, ``base-passwd``: the package database vulnerability scanners read, ``/etc/os-release``,
  ``/etc/passwd``.

Removed: the rest of Debian's minbase (apt and its keyring, perl, bash, util-linux, login, passwd, mount, grep, sed,
findutils, ...): a system that installs or administers packages needs them, a server that never does not.
``dpkg --purge`` removes them, so the package database stays true to the files; the tools maintainer scripts call
(:data:`LAST`, with the libraries they load) are purged last, after the scripts that call them have run.

Then the standard library's bytecode is compiled again, hash-checked: Debian's (py3compile, at install) records each
source's modification time, which ``make image``'s archive sets to 0 for every file, so the interpreter would find
it stale and compile every module it imports again at each start (the root filesystem is read-only: never written).

    python3 image_debian.py            # remove; prints what it removed
    python3 image_debian.py --dry-run  # print what it would keep and remove
"""
from __future__ import annotations

import compileall
import py_compile
import re
import subprocess
import sys
import sysconfig

STATUS = "/var/lib/dpkg/status"
KEPT = ("python3", "python-is-python3", "libstdc++6", "coreutils", "dash", "dpkg", "base-files", "base-passwd")
#: Removed in a second pass: what other packages' removal scripts run (perl for debconf, the shell's utilities) and
#: what dpkg itself checks for on its PATH (diff, ldconfig).
LAST = ("perl-base", "bash", "sed", "grep", "findutils", "diffutils", "libc-bin")


def installed(status: str) -> dict[str, dict[str, str]]:
    """The installed packages of a dpkg status file: {name: fields}."""
    packages = {}
    for block in status.split("\n\n"):
        fields: dict[str, str] = {}
        key = ""
        for line in block.splitlines():
            if line[:1] in (" ", "\t") and key:
                fields[key] += "\n" + line
            elif ":" in line:
                key, value = line.split(":", 1)
                fields[key] = value.strip()
        if fields.get("Status", "").endswith(" installed"):
            packages[fields["Package"]] = fields
    return packages


def kept(packages: dict[str, dict[str, str]], roots: tuple[str, ...] = KEPT) -> set[str]:
    """``roots`` and every installed package they depend on (Depends, Pre-Depends; of alternatives, the first one
    installed or provided)."""
    provided: dict[str, list[str]] = {}
    for name, fields in packages.items():
        for item in filter(None, re.split(r"\s*,\s*", fields.get("Provides", ""))):
            provided.setdefault(item.split()[0], []).append(name)
    missing = [r for r in roots if r not in packages]
    if missing:
        raise SystemExit(f"image_debian.py: {', '.join(missing)} not installed: install them first")
    keep: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep.add(name)
        for field in ("Pre-Depends", "Depends"):
            for alternatives in filter(None, re.split(r"\s*,\s*", packages[name].get(field, ""))):
                for alternative in alternatives.split("|"):
                    wanted = alternative.strip().split()[0].split(":")[0]
                    found = [wanted] if wanted in packages else provided.get(wanted, [])
                    if found:
                        todo.append(found[0])
                        break
    return keep


def main(argv: list[str]) -> int:
    with open(STATUS, encoding="utf-8") as f:
        packages = installed(f.read())
    keep = kept(packages)
    remove = sorted(set(packages) - keep)
    if "--dry-run" in argv:
        print("keep:", " ".join(sorted(keep)))
        print("remove:", " ".join(remove))
        return 0
    last = sorted(kept(packages, tuple(p for p in LAST if p in remove)) & set(remove))   # with their libraries
    first = [p for p in remove if p not in last]
    for batch in (first, last):
        if batch:
            done = subprocess.run(["dpkg", "--purge", "--force-remove-essential", "--force-remove-protected",
                                   "--force-depends", *batch],
                                  capture_output=True, text=True, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                                                                       "DEBIAN_FRONTEND": "noninteractive"})
            if done.returncode:   # dpkg's warnings (an essential package removed, as asked) only on failure
                sys.stderr.write(done.stdout + done.stderr)
                raise SystemExit(f"image_debian.py: dpkg --purge exited {done.returncode}")
    stdlib = sysconfig.get_paths()["stdlib"]
    if not compileall.compile_dir(stdlib, quiet=1, force=True, workers=1,
                                  invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH):
        raise SystemExit(f"image_debian.py: a module of {stdlib} does not compile")
    print(f"image_debian.py: kept {len(keep)} packages, removed {len(remove)}: {' '.join(remove)}; {stdlib}'s "
          "bytecode compiled hash-checked")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

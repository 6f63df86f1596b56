"""The image's Python packages, finished by the image's own ``python3`` once pip has installed them with ``--target``
(``make image`` in the root filesystem, the ``Dockerfile`` in its build stage), so both images hold the same files:

- :data:`REMOVED`: ``kubernetes.aio``, the asyncio client of the kubernetes distribution, which imports aiohttp: the
  image leaves aiohttp out (tools/image_requirements.py, ``LEFT_OUT``) and the server uses the synchronous client. Its
  lines leave the distribution's RECORD with it, so the record stays true to the files.
- ``bin/`` and ``include/``: pip ``--target`` writes the console scripts there, with the installing interpreter's
  path in their first line, and C headers (greenlet's, under a path named for the installing interpreter); the image's
  command is ``python -m webhook`` (the ENTRYPOINT), the CLI runs as ``python -m policylib.cli``, and nothing is
  compiled against the headers.
- ``direct_url.json``: where pip found the project's wheel on the machine that built the image (its path, and the
  hash of a zip whose timestamps are the build's), which would make two builds of one tree differ.
- Bytecode, compiled ahead by the image's interpreter for every module but :data:`NOT_COMPILED`, as hash-checked
  ``.pyc`` files: valid whatever the files' modification times (the archive sets them all to 0) and never written at
  run time (a read-only root filesystem, ``PYTHONDONTWRITEBYTECODE``). Not compiled: the generated API classes and
  models of the kubernetes client (68 modules and 846, about 21 MB of bytecode), which the server never imports:
  policylib reads the API as JSON through ``ApiClient`` (policylib/shell/kube/). They stay importable from source.

    python3 image_site.py /usr/local/lib/python3.13/dist-packages
"""
from __future__ import annotations

import compileall
import csv
import io
import py_compile
import re
import shutil
import sys
from pathlib import Path

REMOVED = ("kubernetes/aio", "bin", "include")
NOT_COMPILED = ("kubernetes/client/api", "kubernetes/client/models")


def recorded(path: str) -> str:
    """A RECORD path as installed under the ``--target`` directory: pip records what it puts in ``bin/`` and
    ``include/`` as ``../../bin/`` and ``../../include/`` (its temporary home scheme)."""
    return path.removeprefix("../../")


def remove(site: Path, path: str) -> int:
    """Removes ``path`` (relative to ``site``) and its lines from the RECORD of the distribution that installed it;
    returns how many recorded files went."""
    if not (site / path).exists():
        raise SystemExit(f"image_site.py: {site / path} is not installed: is REMOVED still right?")
    removed = 0
    for record in site.glob("*.dist-info/RECORD"):
        rows = list(csv.reader(io.StringIO(record.read_text(encoding="utf-8"))))
        kept = [row for row in rows if not (row and (recorded(row[0]) == path or recorded(row[0]).startswith(path + "/")))]
        if len(kept) != len(rows):
            out = io.StringIO()
            csv.writer(out, lineterminator="\n").writerows(kept)
            record.write_text(out.getvalue(), encoding="utf-8")
            removed += len(rows) - len(kept)
    if (site / path).is_dir():
        shutil.rmtree(site / path)
    else:
        (site / path).unlink()
    return removed


def compile_site(site: Path) -> bool:
    """Compiles every module of ``site`` but those inside :data:`NOT_COMPILED`'s packages (their ``__init__`` is
    compiled: the client imports the models package's, a map of names to modules), optimization level 0,
    hash-checked."""
    skip = re.compile("^(" + "|".join(re.escape(str(site / p)) for p in NOT_COMPILED) + r")/(?!__init__\.py$)")
    return compileall.compile_dir(str(site), quiet=1, rx=skip, optimize=0,
                                  invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH, workers=1)


def main(argv: list[str]) -> int:
    (where,) = argv
    site = Path(where)
    paths = list(REMOVED) + sorted(str(p.relative_to(site)) for p in site.glob("*.dist-info/direct_url.json"))
    counts = [f"{path} ({remove(site, path)} recorded files)" for path in paths]
    if not compile_site(site):
        raise SystemExit(f"image_site.py: a module of {site} does not compile")
    print(f"image_site.py: removed {', '.join(counts)}; compiled {site} but {', '.join(NOT_COMPILED)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""``-k DIR``: the objects a kustomize overlay builds, as ``kubectl apply -k`` would send them.

The build runs ``kubectl kustomize DIR`` where kubectl is on PATH, else ``kustomize build DIR``;
with neither, one clear error names what is missing. This is the CLI's edge: a subprocess, never
called by the policies.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..errors import InputError

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")


def build_command(directory: str) -> list[str]:
    """The build to run for ``directory``: kubectl's built-in kustomize first, then kustomize."""
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize", directory]
    if shutil.which("kustomize"):
        return ["kustomize", "build", directory]
    raise InputError(f"-k {directory}: needs kubectl (kubectl kustomize) or kustomize on PATH; neither was found")


def build(directory: str, workdir: str | None = None) -> str:
    """Build ``directory`` and return the path of a file holding the output (named for the directory)."""
    if not os.path.isdir(directory):
        raise InputError(f"-k {directory}: not a directory")
    command = build_command(directory)
    try:
        run = subprocess.run(command, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise InputError(f"-k {directory}: {' '.join(command)} failed: {e}") from None
    if run.returncode != 0:
        problem = (run.stderr.strip().splitlines() or ["no output"])[-1]
        raise InputError(f"-k {directory}: {' '.join(command)} failed: {problem}")
    out = Path(workdir or tempfile.mkdtemp(prefix="policylib-kustomize-")) / \
        f"kustomize-build-{Path(directory).resolve().name or 'root'}.yaml"
    out.write_text(run.stdout, encoding="utf-8")
    return str(out)


def kustomize_trees(paths: list[str]) -> list[str]:
    """The directories under ``paths`` (read with -R) that hold a kustomization: -R reads their raw
    files, not the overlay they build."""
    found = []
    for path in paths:
        if not os.path.isdir(path):
            continue
        for root, _, files in os.walk(path):
            if any(f in files for f in KUSTOMIZATION_FILES):
                found.append(root)
    return sorted(found)

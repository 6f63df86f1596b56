"""Where the workers' Prometheus multiprocess files go. Imports no prometheus_client: ``serve`` sets
:data:`MULTIPROC_ENV` before anything imports it (prometheus_client reads it once, at import)."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def multiprocess_dir() -> str | None:
    return os.environ.get(MULTIPROC_ENV) or None


def prepare_metrics_dir() -> str:
    """An empty directory for multiprocess metrics: ``PROMETHEUS_MULTIPROC_DIR`` or a new one."""
    directory = os.environ.get(MULTIPROC_ENV)
    if directory:
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        for stale in path.glob("*.db"):
            stale.unlink()
    else:
        directory = tempfile.mkdtemp(prefix="policylib-metrics-")
        os.environ[MULTIPROC_ENV] = directory
    return directory

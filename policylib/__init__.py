"""policylib: placement policies for Kubernetes AI and serving workloads.

Pure functions: dicts in, :class:`Result` out. The modules of this package do no I/O; the shell
above them (:mod:`policylib.shell`: files, the cluster; :mod:`policylib.cli`) does, and this front door
re-exports one function of it, :func:`load_config`, which also reads a file (docs/architecture.md).
"""
from .config import Config, HostSpread, ZoneSpread
from .errors import ConfigError, ErrorType, FieldError, FieldPath, PolicyError, PolicylibError
from .facts import ClusterFacts
from .gang import is_kubeflow_job, mutate_kubeflow_job, validate_gang_labels
from .mutate import mutate
from .result import Result
from .shell.files import load_config
from .spread import Drift, derived_max_skew, effective_replicas, host_constraint, mutate_deployment, spread_drift, zone_constraint
from .validation import validate_topology_spread_constraints

# Last, so that these functions shadow their modules' names on purpose:
# isort: off
from .simulate import Placement, simulate
from .check import Finding, check
# isort: on


def _version() -> str:
    """The installed distribution's version (``setup.cfg``'s ``version``); from a source
    tree that was never installed, ``setup.cfg`` itself; else ``0+unknown``."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("policylib")
    except PackageNotFoundError:
        import configparser
        from pathlib import Path
        cfg = configparser.ConfigParser()
        cfg.read(Path(__file__).resolve().parent.parent / "setup.cfg", encoding="utf-8")
        return cfg.get("metadata", "version", fallback="0+unknown")


__version__ = _version()

__all__ = [
    "__version__",
    "ClusterFacts", "Config", "ConfigError", "Drift", "ErrorType", "FieldError", "FieldPath", "HostSpread", "PolicyError",
    "PolicylibError", "Result", "ZoneSpread", "derived_max_skew", "effective_replicas", "host_constraint",
    "load_config", "mutate", "mutate_deployment", "spread_drift", "validate_topology_spread_constraints",
    "zone_constraint",
    "is_kubeflow_job", "mutate_kubeflow_job", "validate_gang_labels",
    "Placement", "simulate", "Finding", "check",
]

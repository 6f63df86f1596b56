"""policylib: placement policies for Kubernetes AI and serving workloads.

Pure functions: dicts in, :class:`Result` out. No network, no files except
:func:`load_config`.
"""
from .config import Config, HostSpread, ZoneSpread, load_config
from .errors import ConfigError, FieldError, PolicyError, PolicylibError
from .facts import ClusterFacts
from .gang import is_kubeflow_job, mutate_kubeflow_job, validate_gang_labels
from .mutate import mutate
from .result import Result
from .spread import (Drift, effective_replicas, derived_max_skew, host_constraint, mutate_deployment,
                     spread_drift, zone_constraint)
from .validation import validate_topology_spread_constraints
from .simulate import Placement, simulate  # noqa: E402 -- the function shadows its module's name on purpose
from .check import Finding, check  # noqa: E402 -- likewise

__all__ = [
    "ClusterFacts", "Config", "ConfigError", "Drift", "FieldError", "HostSpread", "PolicyError",
    "PolicylibError", "Result", "ZoneSpread", "derived_max_skew", "effective_replicas", "host_constraint",
    "load_config", "mutate", "mutate_deployment", "spread_drift", "validate_topology_spread_constraints",
    "zone_constraint",
    "is_kubeflow_job", "mutate_kubeflow_job", "validate_gang_labels",
    "Placement", "simulate", "Finding", "check",
]

"""Which version of Kubernetes' Workload API (``scheduling.k8s.io`` Workload and PodGroup) a cluster serves,
what turns it on, and which version gang method ``workload`` writes (rules G22-G24).

What each Kubernetes minor can serve, and behind what, read in k8s.io/kubernetes (``pkg/features/kube_features.go``,
``pkg/registry/scheduling/rest/storage_scheduling.go``, ``pkg/apis/scheduling/install``) at v1.35.0, v1.36.3 and
v1.37.2:

- 1.35: ``v1alpha1`` (a Workload only; pods point at it by ``spec.workloadRef``): nothing policylib writes;
- 1.36: ``v1alpha2``, alpha: the gates ``GangScheduling`` and ``GenericWorkload`` and
  ``--runtime-config=scheduling.k8s.io/v1alpha2=true``;
- 1.37: ``v1beta1`` (beta, still off by default: ``GenericWorkload`` is beta but off, and a new beta API needs
  ``--runtime-config=scheduling.k8s.io/v1beta1=true``) and ``v1alpha3`` (alpha); the ``GangScheduling`` gate is
  gone (the gang plugin follows ``GenericWorkload``), and ``v1alpha2`` is removed: 1.37's API server neither
  serves nor decodes it (its storage version is ``v1beta1``).

Topology (``schedulingConstraints.topology``) needs ``TopologyAwareWorkloadScheduling`` (alpha in 1.36 and 1.37) on
kube-apiserver, which otherwise drops the field on create, and on kube-scheduler, whose ``TopologyPlacement`` and
``PodGroupPodsCount`` plugins it turns on.

Pure: the served versions and the minor come in as data (``--kube-version``, or what the webhook, the controller
and ``--cluster`` read from the API server's discovery and ``/version``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .constants import NATIVE_GANG_GROUP, NATIVE_GANG_V1ALPHA2, NATIVE_GANG_V1BETA1, NATIVE_GANG_VERSIONS
from .errors import InputError

AUTO = "auto"
#: ``gang.workloadAPIVersion``: ``auto`` (the newest version policylib writes that the cluster serves), or one.
SETTINGS = (AUTO,) + NATIVE_GANG_VERSIONS
GENERIC_WORKLOAD = "GenericWorkload"
GANG_SCHEDULING = "GangScheduling"
TOPOLOGY_GATE = "TopologyAwareWorkloadScheduling"
#: The components that take the gates (the harness starts all three with them; the API server and the
#: scheduler are the ones that read them for gangs).
COMPONENTS = "kube-apiserver, kube-scheduler and kube-controller-manager"


@dataclass(frozen=True)
class Minor:
    """What one Kubernetes minor can serve of the Workload API and what gang scheduling needs there."""

    minor: int
    #: Versions this minor can serve (each only behind ``--runtime-config``), the newest first.
    versions: tuple[str, ...]
    #: The feature gates gang scheduling needs (on kube-apiserver, kube-scheduler, kube-controller-manager).
    gates: tuple[str, ...]
    #: The resources of each version (a version a cluster serves without both Workloads and PodGroups is of no use).
    resources: tuple[tuple[str, tuple[str, ...]], ...] = ()


#: Rule G22: the minors policylib knows, read at v1.35.0, v1.36.3 and v1.37.2 (the module docstring).
MINORS: dict[int, Minor] = {
    35: Minor(35, ("v1alpha1",), (GENERIC_WORKLOAD,), (("v1alpha1", ("workloads",)),)),
    36: Minor(36, (NATIVE_GANG_V1ALPHA2,), (GANG_SCHEDULING, GENERIC_WORKLOAD),
              ((NATIVE_GANG_V1ALPHA2, ("workloads", "podgroups")),)),
    37: Minor(37, (NATIVE_GANG_V1BETA1, "v1alpha3"), (GENERIC_WORKLOAD,),
              ((NATIVE_GANG_V1BETA1, ("workloads", "podgroups")),
               ("v1alpha3", ("workloads", "podgroups", "compositepodgroups")))),
}
OLDEST_MINOR, NEWEST_MINOR = min(MINORS), max(MINORS)
#: What preview, plan, simulate and check assume without ``--kube-version`` or ``--cluster``: the newest minor.
DEFAULT_MINOR = NEWEST_MINOR


def api_version(version: str) -> str:
    return f"{NATIVE_GANG_GROUP}/{version}"


def minor_of(minor: int) -> Minor | None:
    """The minor as policylib knows it: a newer one than the newest known is read as the newest (its APIs are
    assumed to be the newest known's); an older one than the oldest has no Workload API at all."""
    if minor > NEWEST_MINOR:
        return MINORS[NEWEST_MINOR]
    return MINORS.get(minor)


def parse_kube_version(text: str) -> int:
    """Rule G22: the Kubernetes minor of ``--kube-version`` (``1.36``, ``v1.37``, ``1.37.2``, ``v1.36.3-eks-1``)
    or of a server's ``gitVersion``; :class:`~policylib.errors.InputError` names anything else."""
    match = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.\d+)?(?:[-+][0-9A-Za-z.+-]*)?", text.strip())
    if not match or int(match.group(1)) != 1:
        raise InputError(f"--kube-version {text!r}: not a Kubernetes version like 1.37 or v1.36.3")
    return int(match.group(2))


@dataclass(frozen=True)
class WorkloadApi:
    """Rule G22: the Workload API version gang method ``workload`` writes on one cluster, and how that was decided.

    ``version`` is what is written (None: none can be); ``served`` the versions the API server answered for
    (None: not asked); ``minor`` the cluster's Kubernetes minor (None: not known); ``setting`` the config's
    ``gang.workloadAPIVersion``; ``source`` says in words where the decision came from."""

    version: str | None
    served: tuple[str, ...] | None
    minor: int | None
    setting: str
    source: str

    @property
    def api_version(self) -> str | None:
        return api_version(self.version) if self.version else None

    @property
    def known(self) -> bool:
        """Whether the decision is the cluster's own (served versions read, or ``--kube-version`` given), not an
        assumption: only a known missing API refuses pods (rule G23)."""
        return self.served is not None or self.minor is not None

    def describe(self) -> str:
        """``scheduling.k8s.io/v1beta1 (Kubernetes 1.37)``: what is written and why, for reasons."""
        if self.version is None:
            return f"no Workload API version ({self.source})"
        return f"{api_version(self.version)} ({self.source})"

    def missing(self) -> str:
        """Rule G23: why nothing can be written, and how to turn the API on (the flags of the cluster's minor)."""
        return missing_message(self)

    def missing_in_short(self) -> str:
        """Rule G23: :meth:`missing`'s first clause alone (an admission warning is cut at 120 characters)."""
        if self.minor is not None:
            known = minor_of(self.minor)
            writable = [v for v in NATIVE_GANG_VERSIONS if known and v in known.versions]
            if not writable:
                return f"Kubernetes 1.{self.minor} has no Workload API policylib writes"
            if self.setting != AUTO and self.setting not in writable:
                return f"Kubernetes 1.{self.minor} cannot serve {api_version(self.setting)}"
            return f"{api_version(self.setting if self.setting != AUTO else writable[0])} is not served"
        wanted = self.setting if self.setting != AUTO else " or ".join(NATIVE_GANG_VERSIONS)
        return f"{NATIVE_GANG_GROUP}/{wanted} is not served"


def resolve(setting: str = AUTO, served: tuple[str, ...] | list[str] | None = None,
            minor: int | None = None) -> WorkloadApi:
    """Rule G22: the version to write. ``served`` (what the API server's discovery lists) decides when known: the
    setting's version if served, or for ``auto`` the newest policylib writes that is served; else ``minor``
    (``--kube-version``, or the server's ``/version``) decides by what that minor can serve; else Kubernetes 1.37
    is assumed (``auto``: ``v1beta1``) and an explicit setting is taken as it is."""
    wanted = NATIVE_GANG_VERSIONS if setting == AUTO else (setting,)
    if served is not None:
        served = tuple(v for v in NATIVE_GANG_VERSIONS if v in served) + tuple(
            v for v in served if v not in NATIVE_GANG_VERSIONS)
        version = next((v for v in wanted if v in served), None)
        listed = ", ".join(api_version(v) for v in served) if served else "no Workload API"
        where = f"Kubernetes 1.{minor}: " if minor is not None else ""
        return WorkloadApi(version, served, minor, setting, f"{where}the API server serves {listed}")
    if minor is not None:
        known = minor_of(minor)
        can = known.versions if known else ()
        version = next((v for v in wanted if v in can), None)
        return WorkloadApi(version, None, minor, setting, f"Kubernetes 1.{minor}")
    version = wanted[0]
    source = f"Kubernetes 1.{DEFAULT_MINOR} assumed" if setting == AUTO else "gang.workloadAPIVersion"
    return WorkloadApi(version, None, None, setting, source)


def gate_flags(minor: int, topology: bool = False) -> str:
    """``GenericWorkload=true`` (1.37) or ``GangScheduling=true,GenericWorkload=true`` (1.36), with
    ``TopologyAwareWorkloadScheduling=true`` for a topology constraint."""
    known = minor_of(minor)
    gates = list(known.gates if known else (GENERIC_WORKLOAD,))
    if topology:
        gates.append(TOPOLOGY_GATE)
    return ",".join(f"{g}=true" for g in gates)


def enable_instructions(minor: int, version: str, topology: bool = False) -> str:
    """Rule G22: the flags that make Kubernetes 1.``minor`` serve ``version`` and gang-schedule its PodGroups."""
    return (f"start {COMPONENTS} with --feature-gates={gate_flags(minor, topology)} and kube-apiserver with "
            f"--runtime-config={api_version(version)}=true")


def instructions(api: WorkloadApi, topology: bool = False) -> str:
    """What to enable for ``api``'s cluster: for its minor when known, else for every minor policylib writes to."""
    if api.minor is not None:
        known = minor_of(api.minor)
        target = next((v for v in (api.version, api.setting) if v in NATIVE_GANG_VERSIONS and known
                       and v in known.versions), None)
        if target is None and known:
            target = next((v for v in NATIVE_GANG_VERSIONS if v in known.versions), None)
        if target is not None:
            return enable_instructions(api.minor, target, topology)
    return "; ".join(f"on Kubernetes 1.{m}: {enable_instructions(m, v, topology)}"
                     for m, v in ((NEWEST_MINOR, NATIVE_GANG_V1BETA1), (36, NATIVE_GANG_V1ALPHA2))
                     if api.setting in (AUTO, v))


def missing_message(api: WorkloadApi) -> str:
    """Rule G23: the message of a cluster on which no PodGroup can be made: which API is missing, and how to turn
    it on (or why it cannot be, on this minor)."""
    setting = f", gang.workloadAPIVersion {api.setting}" if api.setting != AUTO else ""
    if api.minor is not None:
        known = minor_of(api.minor)
        writable = [v for v in NATIVE_GANG_VERSIONS if known and v in known.versions]
        if not writable:
            return (f"Kubernetes 1.{api.minor} serves no Workload API policylib writes (gang.method workload: "
                    f"{api_version(NATIVE_GANG_V1ALPHA2)} from 1.36, {api_version(NATIVE_GANG_V1BETA1)} from 1.37): "
                    "upgrade the cluster, or choose another gang.method")
        if api.setting != AUTO and api.setting not in writable:
            return (f"Kubernetes 1.{api.minor} cannot serve {api_version(api.setting)} (gang.method workload"
                    f"{setting}): it serves {', '.join(api_version(v) for v in writable)}: set "
                    f"gang.workloadAPIVersion to auto or {writable[0]}")
        wanted = api.setting if api.setting != AUTO else writable[0]
        return (f"the API server does not serve {api_version(wanted)} (gang.method workload{setting}; Kubernetes "
                f"1.{api.minor}): {instructions(api)}")
    wanted = api.setting if api.setting != AUTO else " or ".join(NATIVE_GANG_VERSIONS)
    return (f"the API server does not serve {NATIVE_GANG_GROUP}/{wanted} (gang.method workload{setting}): "
            f"{instructions(api)}")


def removed_by_upgrade(minor: int) -> tuple[int, tuple[str, ...]] | None:
    """Rule G24: the next minor and the Workload API versions ``minor`` can serve that it does not (their stored
    objects become unreadable: the next API server neither serves nor decodes them); None when the next minor
    is not known to policylib."""
    now, then = MINORS.get(minor), MINORS.get(minor + 1)
    if now is None or then is None:
        return None
    return minor + 1, tuple(v for v in now.versions if v not in then.versions)


def resources_of(version: str) -> tuple[str, ...]:
    """The resources (plural names) of a Workload API version, from the newest minor that serves it."""
    for minor in sorted(MINORS, reverse=True):
        found = dict(MINORS[minor].resources).get(version)
        if found:
            return found
    return ()

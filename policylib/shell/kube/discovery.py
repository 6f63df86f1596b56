"""What the API server serves, read from its discovery documents and ``/version``."""
from __future__ import annotations

from ...constants import NATIVE_GANG_GROUP, NATIVE_GANG_VERSIONS
from .client import Api
from .errors import NotFound


def served_api_groups(api: Api) -> list[str]:
    """``group/version`` of every version of every API group the server serves (``/apis``, an APIGroupList)."""
    found = api.request("GET", "/apis") or {}
    return [str(v.get("groupVersion")) for g in found.get("groups") or [] if isinstance(g, dict)
            for v in g.get("versions") or [] if isinstance(v, dict) and v.get("groupVersion")]


def server_version(api: Api, timeout: float | tuple[float, float] | None = None) -> str:
    """The API server's ``gitVersion`` (``/version``)."""
    return str(api.request("GET", "/version", timeout=timeout).get("gitVersion", ""))


def served_workload_versions(api: Api, versions: tuple[str, ...] = NATIVE_GANG_VERSIONS,
                             timeout: float | tuple[float, float] | None = None) -> tuple[str, ...]:
    """Rule G22: the versions of ``scheduling.k8s.io`` (of ``versions``) whose discovery document lists both
    ``workloads`` and ``podgroups``: the group's document names the versions served, each version's its
    resources (a version enabled without the GenericWorkload gate lists none). NotFound for the group is
    none served; any other failure raises."""
    try:
        group = api.request("GET", f"/apis/{NATIVE_GANG_GROUP}", timeout=timeout) or {}
    except NotFound:
        return ()
    listed = {v.get("version") for v in group.get("versions") or [] if isinstance(v, dict)}
    served = []
    for version in versions:
        if version not in listed:
            continue
        try:
            found = api.request("GET", f"/apis/{NATIVE_GANG_GROUP}/{version}", timeout=timeout) or {}
        except NotFound:
            continue
        names = {r.get("name") for r in found.get("resources") or [] if isinstance(r, dict)}
        if {"workloads", "podgroups"} <= names:
            served.append(version)
    return tuple(served)

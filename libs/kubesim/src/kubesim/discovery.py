"""Legacy discovery documents: /version, /api, /apis, /api/v1, /apis/{g}/{v}.

kubectl asks for aggregated discovery first and falls back to these; the kubernetes-asyncio
dynamic client reads only these.
"""

from __future__ import annotations

from typing import Any

from kubesim.resources import COMMON_VERBS, ResourceRegistry, ResourceType

VERSION_INFO: dict[str, str] = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-kubesim",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2024-12-11T00:00:00Z",
    "goVersion": "go1.23.4",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def version() -> dict[str, str]:
    return dict(VERSION_INFO)


def core_versions() -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}],
    }


def _group(resources: ResourceRegistry, group: str) -> dict[str, Any]:
    versions = resources.versions(group)
    entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": entries, "preferredVersion": entries[0]}


def group_list(resources: ResourceRegistry) -> dict[str, Any]:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group(resources, g) for g in resources.groups()],
    }


def group(resources: ResourceRegistry, name: str) -> dict[str, Any] | None:
    if not resources.versions(name):
        return None
    out = _group(resources, name)
    out.update({"kind": "APIGroup", "apiVersion": "v1"})
    return out


def _entries(rt: ResourceType) -> list[dict[str, Any]]:
    main: dict[str, Any] = {
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": list(COMMON_VERBS),
    }
    if rt.short_names:
        main["shortNames"] = list(rt.short_names)
    if rt.categories:
        main["categories"] = list(rt.categories)
    out = [main]
    for sub, verbs in rt.subresources:
        kind = rt.kind
        entry: dict[str, Any] = {}
        if sub == "binding":
            kind = "Binding"
        elif sub == "scale":
            kind = "Scale"
        elif sub == "eviction":
            # kubectl drain reads group/version from here to build its Eviction.
            kind = "Eviction"
            entry = {"group": "policy", "version": "v1"}
        out.append(
            {
                "name": f"{rt.plural}/{sub}",
                "singularName": "",
                "namespaced": rt.namespaced,
                **entry,
                "kind": kind,
                "verbs": list(verbs),
            }
        )
    return out


def resource_list(resources: ResourceRegistry, group: str, version: str) -> dict[str, Any] | None:
    types = resources.in_group_version(group, version)
    if not types:
        return None
    entries: list[dict[str, Any]] = []
    for rt in sorted(types, key=lambda t: t.plural):
        entries.extend(_entries(rt))
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": entries,
    }

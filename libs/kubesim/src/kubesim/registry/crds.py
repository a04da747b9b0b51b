"""How the registry serves CustomResourceDefinitions: checking and defaulting a CRD on
the way in, registering its served versions as resource types (and telling the
discovery hooks), and dropping its objects and types when the CRD goes.
"""

from __future__ import annotations

from typing import Any

from kubesim import statuses
from kubesim.registry.core import (
    _meta,
    now_rfc3339,
)
from kubesim.registry.reads import RegistryReads
from kubesim.resources import (
    CRD_TYPE,
    ResourceType,
    crd_resource_types,
)


class RegistryCrds(RegistryReads):
    """CRD preparation, registration and removal."""

    def _prepare_crd(self, obj: dict[str, Any]) -> None:
        spec = obj.get("spec") or {}
        names = spec.get("names") or {}
        expected = f"{names.get('plural', '')}.{spec.get('group', '')}"
        name = _meta(obj).get("name")
        if name != expected:
            raise statuses.invalid(
                CRD_TYPE,
                str(name),
                [
                    statuses.invalid_value(
                        "metadata.name", name, 'must be spec.names.plural+"."+spec.group'
                    )
                ],
            )
        names.setdefault("singular", str(names.get("kind", "")).lower())
        names.setdefault("listKind", f"{names.get('kind', '')}List")
        now = now_rfc3339()
        accepted = dict(names)
        obj["status"] = {
            "acceptedNames": accepted,
            "conditions": [
                {
                    "type": "NamesAccepted",
                    "status": "True",
                    "reason": "NoConflicts",
                    "message": "no conflicts found",
                    "lastTransitionTime": now,
                },
                {
                    "type": "Established",
                    "status": "True",
                    "reason": "InitialNamesAccepted",
                    "message": "the initial names have been accepted",
                    "lastTransitionTime": now,
                },
            ],
            "storedVersions": [
                v.get("name") for v in spec.get("versions") or [] if v.get("storage")
            ],
        }

    def _sync_crd(self, crd: dict[str, Any]) -> None:
        types, storage = crd_resource_types(crd)
        self.resources.set_crd_types(_meta(crd)["name"], types, storage)
        for hook in self.on_crd_change:
            hook()

    def _drop_crd(self, crd: dict[str, Any]) -> None:
        spec = crd.get("spec") or {}
        key = (str(spec.get("group", "")), str((spec.get("names") or {}).get("plural", "")))
        for obj in list(self.store.items(key)):
            m = obj["metadata"]
            self.store.delete(key, m.get("namespace") or "", m["name"])
        self.store.drop_resource(key)
        self.resources.set_crd_types(_meta(crd)["name"], [], "")
        for hook in self.on_crd_change:
            hook()

    def _after_remove(self, rt: ResourceType, last: dict[str, Any]) -> None:
        if rt.key == CRD_TYPE.key:
            self._drop_crd(last)

"""The served AppWrapper CRD, read at start-up and every ``crd_check_interval`` (I/O).

Each distinct schema is logged once: a warning listing every Clearance field it prunes, what
replaces it and the fix (``kubectl apply -k deploy/crd``), or one info line when it keeps them
all. In ``auto`` bookkeeping mode the schema also decides where the bookkeeping lives
(:class:`~clearance_dispatcher.storage.Bookkeeping`); a switch re-queues every AppWrapper so it
is read through the new storage. A CRD that cannot be read (absent, forbidden) makes ``auto``
choose the annotation, which works under any schema.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Final

import msgspec

from clearance.kube import KubeError, Resource
from clearance_dispatcher import crdschema
from clearance_dispatcher.runtime import Runtime
from clearance_dispatcher.storage import StorageKind

log = logging.getLogger(__name__)

CRDS: Final = Resource(
    "apiextensions.k8s.io",
    "v1",
    "customresourcedefinitions",
    "CustomResourceDefinition",
    namespaced=False,
)


class SchemaWatch:
    """Reads the AppWrapper CRD; logs what it drops; picks the storage in auto mode."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.name = f"appwrappers.{rt.settings.appwrapper_group}"
        self._seen: str | None = None
        """Fingerprint of the schema (or error) logged last."""
        self._chosen = False
        """The first check chose the storage (a choice, not a switch: not logged as one)."""

    async def check(self) -> None:
        rt = self.rt
        try:
            crd: dict[str, Any] = msgspec.json.decode(await rt.kube.get(CRDS, self.name))
        except KubeError as exc:
            if self._once(f"error {exc.code}"):
                log.warning(
                    "cannot read the AppWrapper CRD; its schema is unknown",
                    extra={"crd": self.name, "error": str(exc), "bookkeeping": self._mode()},
                )
            self._use("annotations")
            return
        schema = crdschema.version_schema(crd, rt.settings.appwrapper_version)
        if schema is None:
            if self._once("unserved"):
                log.error(
                    "the AppWrapper CRD does not serve the configured version",
                    extra={"crd": self.name, "version": rt.settings.appwrapper_version},
                )
            return
        kept = crdschema.bookkeeping_kept(schema)
        self._use("status" if kept else "annotations")
        if not self._once(json.dumps(schema, sort_keys=True)):
            return
        dropped = crdschema.dropped(schema)
        extra = {
            "crd": self.name,
            "dropped": [d.path for d in dropped],
            "bookkeeping": rt.storage.kind,
        }
        if not dropped:
            log.info("the served AppWrapper CRD keeps every Clearance field", extra=extra)
        elif rt.storage.kind == "status" and not kept:
            log.error(
                crdschema.summary(dropped)
                + "; CLEARANCE_BOOKKEEPING=status cannot work under it: AppWrappers stay "
                "Pending (set auto or annotations)",
                extra=extra,
            )
        else:
            log.warning(crdschema.summary(dropped), extra=extra)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.rt.settings.crd_check_interval)
            try:
                await self.check()
            except Exception as exc:  # never let a bad read stop the loop
                log.warning("AppWrapper CRD check failed", extra={"error": repr(exc)})

    def _once(self, fingerprint: str) -> bool:
        if fingerprint == self._seen:
            return False
        self._seen = fingerprint
        return True

    def _mode(self) -> str:
        return f"{self.rt.settings.bookkeeping} ({self.rt.storage.kind})"

    def _use(self, kind: StorageKind) -> None:
        rt = self.rt
        if rt.settings.bookkeeping != "auto":
            return
        first, self._chosen = not self._chosen, True
        if not rt.storage.use(kind) or first:
            return
        log.warning(
            "bookkeeping storage switched",
            extra={"crd": self.name, "bookkeeping": kind},
        )
        for key in list(rt.state.appwrappers):
            rt.queue.add(key)

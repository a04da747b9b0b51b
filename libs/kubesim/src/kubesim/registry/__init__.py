"""REST semantics of the generic registry: get, list, create, update, patch, delete, watch start.

This is the part of kube-apiserver between the HTTP handler and etcd (registry Store,
strategies, admission). It raises :class:`ApiError` and returns plain dicts; no aiohttp.
:class:`Registry` is built up in layers, one module each: the shared checks
(:mod:`.core`), reads and watch starts (:mod:`.reads`), CRD registration
(:mod:`.crds`), create/update/patch (:mod:`.writes`), deletion (:mod:`.removal`) and
the pod subresources (:mod:`.subresources`).
"""

from __future__ import annotations

from kubesim.registry.core import (
    APPLY_PATCH,
    DEFAULT_NAMESPACES,
    IMMORTAL_NAMESPACES,
    JSON_PATCH,
    MERGE_PATCH,
    STRATEGIC_PATCH,
    WriteResult,
    now_micro,
    now_rfc3339,
)
from kubesim.registry.subresources import Registry
from kubesim.store import Matcher

__all__ = [
    "APPLY_PATCH",
    "DEFAULT_NAMESPACES",
    "IMMORTAL_NAMESPACES",
    "JSON_PATCH",
    "MERGE_PATCH",
    "STRATEGIC_PATCH",
    "Matcher",
    "Registry",
    "WriteResult",
    "now_micro",
    "now_rfc3339",
]

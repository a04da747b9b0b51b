"""The registry's reads: get one object, list with label and field selectors,
pagination and tables, and start a watch from a resourceVersion (or refuse one that
is too old).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from kubesim import statuses
from kubesim.registry.core import RegistryCore
from kubesim.resources import ResourceType
from kubesim.selectors import SelectorError, build_matcher, parse_label_selector
from kubesim.statuses import ApiError
from kubesim.store import Matcher, TooOldError, Watcher, WatchEvent


class RegistryReads(RegistryCore):
    """Get, list and watch-start over the store."""

    # ---- reads ------------------------------------------------------------------------

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        obj = self.store.get(rt.key, namespace or "", name)
        if obj is None:
            raise statuses.not_found(rt, name)
        return self.present(rt, obj)

    def matcher(self, rt: ResourceType, label_selector: str, field_selector: str) -> Matcher | None:
        try:
            return build_matcher(rt, label_selector, field_selector)
        except SelectorError as exc:
            raise statuses.bad_request(str(exc)) from exc

    def list_objects(
        self,
        rt: ResourceType,
        namespace: str | None,
        *,
        label_selector: str = "",
        field_selector: str = "",
        limit: int = 0,
        continue_token: str = "",
        resource_version: str = "",
        resource_version_match: str = "",
        encoded: bool = False,
    ) -> dict[str, Any]:
        """The LIST answer; with `encoded`, its items are their JSON already (`msgspec.Raw`,
        remembered per stored object) for the HTTP answer to embed instead of encoding again.
        """
        match = self.matcher(rt, label_selector, field_selector)
        start_key = ""
        if continue_token:
            try:
                token = json.loads(
                    base64.urlsafe_b64decode(continue_token + "=" * (-len(continue_token) % 4))
                )
                rev = int(token["rv"])
                start_key = str(token["start"])
            except (ValueError, KeyError, TypeError) as exc:
                raise statuses.bad_request(f"continue key is not valid: {exc}") from exc
            if resource_version not in ("", "0") and continue_token:
                raise statuses.bad_request(
                    "specifying resource version is not allowed when using continue"
                )
        else:
            rev = self.store.rev
            exact = resource_version_match == "Exact" or (
                limit > 0
                and resource_version not in ("", "0")
                and resource_version_match != "NotOlderThan"
            )
            if resource_version_match and resource_version_match not in ("Exact", "NotOlderThan"):
                raise statuses.bad_request(
                    f"resourceVersionMatch: Unsupported value: {resource_version_match!r}"
                )
            if resource_version_match and not resource_version:
                raise ApiError(
                    422,
                    "Invalid",
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                )
            if resource_version not in ("", "0"):
                try:
                    requested = int(resource_version)
                except ValueError as exc:
                    raise statuses.bad_request(
                        f"invalid resource version: {resource_version}"
                    ) from exc
                if requested > self.store.rev:
                    raise ApiError(
                        504,
                        "Timeout",
                        f"Too large resource version: {requested}, current: {self.store.rev}",
                        {
                            "causes": [
                                {
                                    "reason": "ResourceVersionTooLarge",
                                    "message": "Too large resource version",
                                }
                            ],
                            "retryAfterSeconds": 1,
                        },
                    )
                if exact:
                    rev = requested
        try:
            state = self.store.snapshot(rt.key, rev)
        except TooOldError as exc:
            if continue_token:
                raise statuses.expired(
                    "The provided continue parameter is too old to display a consistent list "
                    "result. "
                    "You can start a new list without the continue parameter, or use the continue "
                    "token in this response to retrieve the remainder of the results. "
                    "Continuing with "
                    "the provided token results in an inconsistent list - objects that were "
                    "created, "
                    "modified, or deleted between the time the first chunk was returned and "
                    "now may "
                    "show up in the list."
                ) from exc
            raise statuses.too_old_resource_version(exc.requested, exc.oldest) from exc
        narrowed = (
            self._labelled(rt, label_selector) if state is self.store.objects(rt.key) else None
        )
        if narrowed is not None:
            # Only the objects carrying one of the selector's `key=value` labels can match;
            # each is still tested against the whole selector below.
            keys = sorted(k for k in narrowed if namespace is None or k[0] == namespace)
        elif namespace is not None and state is self.store.objects(rt.key):
            # The current state of one namespace: its index, not a scan of every object.
            keys = [(namespace, name) for name in self.store.sorted_names_in(rt.key, namespace)]
        else:
            keys = sorted(k for k in state if namespace is None or k[0] == namespace)
        if start_key:
            keys = [k for k in keys if f"{k[0]}/{k[1]}" >= start_key]
        items: list[Any] = []  # dicts, or msgspec.Raw when `encoded`
        out_meta: dict[str, Any] = {"resourceVersion": str(rev)}
        present = self.present
        remembered = self.list_items if encoded else None
        for i, k in enumerate(keys):
            obj = state[k]
            if match is not None and not match(obj):
                continue
            if limit and len(items) >= limit:
                next_key = f"{k[0]}/{k[1]}"
                token = {"v": "meta.k8s.io/v1", "rv": rev, "start": next_key}
                out_meta["continue"] = (
                    base64.urlsafe_b64encode(json.dumps(token).encode()).decode().rstrip("=")
                )
                if match is None:
                    out_meta["remainingItemCount"] = len(keys) - i
                break
            if remembered is not None:
                items.append(remembered.item(rt, k, obj, self.list_item))
            elif rt.custom:
                items.append(present(rt, obj))
            else:
                # Built-in list items carry no kind/apiVersion (the real encoder drops them).
                items.append({k: v for k, v in obj.items() if k != "kind" and k != "apiVersion"})
        return {
            "kind": rt.list_kind,
            "apiVersion": rt.api_version,
            "metadata": out_meta,
            "items": items,
        }

    def list_item(self, rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """One stored object as a LIST serves it."""
        if rt.custom:
            return self.present(rt, obj)
        # Built-in list items carry no kind/apiVersion (the real encoder drops them).
        return {k: v for k, v in obj.items() if k != "kind" and k != "apiVersion"}

    def _labelled(self, rt: ResourceType, label_selector: str) -> set[tuple[str, str]] | None:
        """Keys of the current objects holding the selector's rarest `key=value` label, or None
        when the selector has no such requirement (`key in (value)` counts)."""
        if not label_selector:
            return None
        best: set[tuple[str, str]] | None = None
        for req in parse_label_selector(label_selector):
            if req.op in ("=", "in") and len(req.values) == 1:
                holders = self.store.labels.holders(rt.key, req.key, req.values[0])
                if best is None or len(holders) < len(best):
                    best = holders
        return best

    # ---- watch ------------------------------------------------------------------------

    def start_watch(
        self,
        rt: ResourceType,
        namespace: str | None,
        match: Matcher | None,
        resource_version: str,
        *,
        send_initial_events: bool | None = None,
    ) -> tuple[list[WatchEvent], Watcher]:
        """Initial events and a registered watcher, atomically (no await in between)."""
        watcher = Watcher(rt.key, namespace, match, self.store.watch_queue_limit)
        initial: list[WatchEvent] = []
        if resource_version in ("", "0") or send_initial_events:
            for obj in sorted(
                self.store.items(rt.key, namespace),
                key=lambda o: (o["metadata"].get("namespace") or "", o["metadata"]["name"]),
            ):
                if match is None or match(obj):
                    initial.append(
                        WatchEvent("ADDED", obj, int(obj["metadata"]["resourceVersion"]))
                    )
        else:
            try:
                requested = int(resource_version)
            except ValueError as exc:
                raise statuses.bad_request(f"invalid resource version: {resource_version}") from exc
            watcher.min_rev = requested
            try:
                for change in self.store.changes_since(requested):
                    if change.resource == rt.key:
                        watcher.offer(change)
            except TooOldError as exc:
                raise statuses.too_old_resource_version(exc.requested, exc.oldest) from exc
        self.store.add_watcher(watcher)
        return initial, watcher

"""Helpers for the watcher suite: kubesim on a private loop thread driven by blocking HTTP,
object builders, and a reader of everything the watcher put on CLEARANCE_KUBE."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import nats.errors
from nats.js import JetStreamContext, api
from tests.support.polling import blocking_until as wait_for

from clearance import events, subjects
from clearance.events import KubeEvent
from kubesim.background import BackgroundApiServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[2]
CRD_FILE = ROOT / "deploy" / "crd" / "appwrapper-crd.yaml"
AW_LABEL = "appwrapper.mcad.ibm.com"

Json = dict[str, Any]


class KubeSim(BackgroundApiServer):
    """An in-process kubesim ApiServer on a private loop thread, driven by blocking HTTP."""

    def _call(self, coro: Awaitable[T], timeout: float = 15.0) -> T:
        return self.call(coro, timeout)

    # -- HTTP -------------------------------------------------------------------------

    def request(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json"
    ) -> tuple[int, Json]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Content-Type", content_type)
        req.add_header("Accept", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                raw = resp.read()
                return resp.status, (json.loads(raw) if raw else {})
        except urllib.error.HTTPError as err:
            raw = err.read()
            try:
                return err.code, json.loads(raw)
            except ValueError:
                return err.code, {"raw": raw.decode(errors="replace")}

    def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> Json:
        code, obj = self.request(method, path, body, **kw)
        assert 200 <= code < 300, f"{method} {path} → {code} {obj}"
        return obj

    def register_crd(self, crd: Json) -> None:
        self.ok("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
        version = crd["spec"]["versions"][0]["name"]
        wait_for(
            lambda: any(
                r.get("name") == plural
                for r in self.request("GET", f"/apis/{group}/{version}")[1].get("resources", [])
            ),
            what=f"{plural}.{group} served",
        )

    def namespace(self, name: str) -> str:
        self.ok("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
        return name

    # object helpers ------------------------------------------------------------------

    def create(self, collection: str, obj: Json) -> Json:
        return self.ok("POST", collection, obj)

    def patch(self, path: str, patch: Json) -> Json:
        return self.ok("PATCH", path, patch, content_type="application/merge-patch+json")

    def delete(self, path: str) -> Json:
        return self.ok("DELETE", path, {"propagationPolicy": "Background"})

    def compact(self) -> None:
        self.ok("POST", "/kubesim/v1/compact", {})

    def drop_watches(self) -> None:
        self.ok("POST", "/kubesim/v1/drop-watches", {})

    def history(self, **query: str) -> list[Json]:
        qs = "&".join(f"{k}={v}" for k, v in query.items())
        items: list[Json] = self.ok("GET", f"/kubesim/v1/history?{qs}")["items"]
        return items


# -- object builders -------------------------------------------------------------------


def pod(name: str, *, aw: str | None = "aw-1", labels: dict[str, str] | None = None) -> Json:
    all_labels = dict(labels or {})
    if aw is not None:
        all_labels[AW_LABEL] = aw
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": all_labels},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }


def job(name: str, *, aw: str = "aw-1") -> Json:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {AW_LABEL: aw}},
        "spec": {
            "template": {
                "metadata": {"labels": {AW_LABEL: aw}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox"}],
                },
            }
        },
    }


def node(name: str) -> Json:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}


def appwrapper(name: str, *templates: Json) -> Json:
    return {
        "apiVersion": "workload.codeflare.dev/v1beta1",
        "kind": "AppWrapper",
        "metadata": {"name": name},
        "spec": {
            "resources": {
                "GenericItems": [{"generictemplate": t, "replicas": 1} for t in templates]
            }
        },
    }


def pods_path(ns: str, name: str | None = None) -> str:
    return f"/api/v1/namespaces/{ns}/pods" + (f"/{name}" if name else "")


def jobs_path(ns: str, name: str | None = None) -> str:
    return f"/apis/batch/v1/namespaces/{ns}/jobs" + (f"/{name}" if name else "")


def nodes_path(name: str | None = None) -> str:
    return "/api/v1/nodes" + (f"/{name}" if name else "")


def aws_path(ns: str, name: str | None = None) -> str:
    return f"/apis/workload.codeflare.dev/v1beta1/namespaces/{ns}/appwrappers" + (
        f"/{name}" if name else ""
    )


# -- the stream ------------------------------------------------------------------------


@dataclass(frozen=True)
class Published:
    seq: int
    subject: str
    headers: dict[str, str]
    event: KubeEvent

    @property
    def uid(self) -> str:
        return self.event.object.metadata.uid

    @property
    def rv(self) -> str:
        return self.event.object.metadata.resource_version

    @property
    def name(self) -> str:
        return self.event.object.metadata.name

    @property
    def action(self) -> str:
        return self.event.action


async def read_stream(
    js: JetStreamContext, filter_subject: str = "clearance.kube.v1.>"
) -> list[Published]:
    """Every message currently in CLEARANCE_KUBE (in stream order)."""
    try:
        info = await js.stream_info(subjects.KUBE_STREAM)
    except Exception:
        return []
    if info.state.messages == 0:
        return []
    sub = await js.pull_subscribe(
        filter_subject,
        stream=subjects.KUBE_STREAM,
        config=api.ConsumerConfig(
            ack_policy=api.AckPolicy.NONE,
            deliver_policy=api.DeliverPolicy.ALL,
            inactive_threshold=10,
        ),
    )
    out: list[Published] = []
    try:
        consumer = await sub.consumer_info()
        if consumer.num_pending == 0:
            return out
        while True:
            try:
                msgs = await sub.fetch(batch=1000, timeout=2)
            except nats.errors.TimeoutError:
                break
            for msg in msgs:
                event = events.decode(msg.data)
                assert isinstance(
                    event,
                    events.KubePodEvent
                    | events.KubeNodeEvent
                    | events.KubeAppWrapperEvent
                    | events.KubeItemEvent,
                )
                out.append(
                    Published(
                        msg.metadata.sequence.stream, msg.subject, dict(msg.headers or {}), event
                    )
                )
            if msgs and msgs[-1].metadata.num_pending == 0:
                break
    finally:
        await sub.unsubscribe()
    return out


async def wait_stream(
    js: JetStreamContext,
    check: Callable[[list[Published]], bool],
    *,
    timeout: float = 15.0,
    what: str = "events",
) -> list[Published]:
    deadline = time.monotonic() + timeout
    published: list[Published] = []
    while time.monotonic() < deadline:
        published = await read_stream(js)
        if check(published):
            return published
        await asyncio.sleep(0.1)
    lines = "\n".join(
        f"  {p.seq} {p.subject} {p.action} rv={p.rv} inferred={p.event.inferred}" for p in published
    )
    raise AssertionError(f"timed out waiting for {what}; stream holds:\n{lines}")


def history_by_uid(entries: list[Json]) -> dict[str, list[tuple[str, str]]]:
    """kubesim's change log as uid → [(type, rv)], in rv order."""
    out: dict[str, list[tuple[str, str]]] = {}
    for e in entries:
        out.setdefault(e["uid"], []).append((e["type"], e["rv"]))
    return out


def published_by_uid(
    published: list[Published], kind: str | None = None
) -> dict[str, list[tuple[str, str]]]:
    out: dict[str, list[tuple[str, str]]] = {}
    for p in published:
        if kind is not None and p.event.kube_kind != kind:
            continue
        out.setdefault(p.uid, []).append((p.action, p.rv))
    return out


class Churn:
    """Background create/update/delete of labelled pods (a thread), until stopped."""

    def __init__(
        self, sim: KubeSim, ns: str, *, prefix: str = "churn", pause: float = 0.01
    ) -> None:
        self.sim = sim
        self.ns = ns
        self.prefix = prefix
        self.pause = pause
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                name = f"{self.prefix}-{self.count}"
                self.sim.create(pods_path(self.ns), pod(name))
                self.sim.patch(pods_path(self.ns, name), {"metadata": {"labels": {"step": "1"}}})
                if self.count % 2 == 0:
                    self.sim.delete(pods_path(self.ns, name))
                self.count += 1
                time.sleep(self.pause)
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def __enter__(self) -> Churn:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        assert self.error is None, f"churn failed: {self.error!r}"

    def __exit__(self, *exc: object) -> None:
        self.stop()


def pod_history(sim: KubeSim, ns: str) -> dict[str, list[tuple[str, str]]]:
    """Changes of labelled pods in ``ns`` (every test pod is labelled unless said otherwise)."""
    return history_by_uid([e for e in sim.history(kind="Pod", namespace=ns)])


def metric(process: Any, name: str) -> float:
    """Sum of a metric's samples on the process's /metrics (0 when absent)."""
    status, text = process.http_get("/metrics")
    assert status == 200
    total = 0.0
    for line in text.splitlines():
        # ``name`` may carry labels (``m{kind="item"}``): then the sample must match exactly.
        if line.startswith(name) and line[len(name)] in (" {" if "{" not in name else " "):
            total += float(line.rsplit(" ", 1)[1])
    return total

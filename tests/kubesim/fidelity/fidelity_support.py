"""Helpers for the kubesim fidelity suite: the server under test, raw HTTP, kubectl, and one small
"client" abstraction with three real implementations (typed kubernetes_asyncio APIs, the dynamic
client with discovery, kubectl as a subprocess) so that a rule from the reference is written once
and checked through every client that can express it.

The reference (../shared/reference/kubernetes-semantics.md) is the oracle: helpers here only
transport requests and normalise answers, they never paper over server behaviour.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

import aiohttp
import yaml
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.rest import ApiException
from kubernetes_asyncio.dynamic import DynamicClient
from tests.support.polling import blocking_until as wait_until
from tests.support.polling import eventually as eventually  # the one eventually, re-exported

from kubesim.background import BackgroundApiServer

JsonObj = dict[str, Any]
PatchType = Literal["merge", "json", "strategic"]
T = TypeVar("T")

DATA = Path(__file__).parent / "data"
CRD_FILE = DATA / "workload.codeflare.dev_appwrappers.yaml"
DEPLOY_CRD_FILE = Path(__file__).parents[3] / "deploy" / "crd" / "appwrapper-crd.yaml"
AW_GROUP = "workload.codeflare.dev"
AW_VERSION = "v1beta1"
AW_PLURAL = "appwrappers"
AW_API_VERSION = f"{AW_GROUP}/{AW_VERSION}"

UID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
TIMESTAMP_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
MICROTIME_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
UNSUPPORTED_MEDIA_MESSAGE = (
    "the body of the request was in an unknown format - accepted media types include: "
    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
)
# Reason → code from the Status catalogue (reference §2.10); kubectl prints only the reason.
REASON_CODES: dict[str, int] = {
    "BadRequest": 400,
    "Forbidden": 403,
    "NotFound": 404,
    "MethodNotAllowed": 405,
    "AlreadyExists": 409,
    "Conflict": 409,
    "Expired": 410,
    "Gone": 410,
    "UnsupportedMediaType": 415,
    "Invalid": 422,
    "TooManyRequests": 429,
    "InternalError": 500,
    "ServiceUnavailable": 503,
    "Timeout": 504,
}
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
CONTENT_TYPES: dict[PatchType, str] = {
    "merge": MERGE_PATCH,
    "json": JSON_PATCH,
    "strategic": STRATEGIC_PATCH,
}


# ----------------------------------------------------------------------------------------------
# Resource table


@dataclass(frozen=True)
class Kind:
    """How each client addresses one resource type."""

    plural: str
    api_version: str
    kind: str
    typed_api: str  # attribute of kubernetes_asyncio.client, or "custom"
    typed_name: str  # the snake_case suffix of typed methods: create_namespaced_<typed_name>

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def kubectl_name(self) -> str:
        """`pods`, `jobs.batch`, `appwrappers.workload.codeflare.dev`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


KINDS: dict[str, Kind] = {
    k.plural: k
    for k in (
        Kind("pods", "v1", "Pod", "CoreV1Api", "pod"),
        Kind("configmaps", "v1", "ConfigMap", "CoreV1Api", "config_map"),
        Kind("events", "v1", "Event", "CoreV1Api", "event"),
        Kind("jobs", "batch/v1", "Job", "BatchV1Api", "job"),
        Kind("leases", "coordination.k8s.io/v1", "Lease", "CoordinationV1Api", "lease"),
        Kind(AW_PLURAL, AW_API_VERSION, "AppWrapper", "custom", "custom_object"),
    )
}


# ----------------------------------------------------------------------------------------------
# Manifests


def pod(
    name: str,
    namespace: str | None,
    *,
    labels: Mapping[str, str] | None = None,
    node_name: str | None = None,
    finalizers: Sequence[str] | None = None,
    grace: int | None = None,
    containers: Sequence[str] = ("main",),
    generate_name: str | None = None,
) -> JsonObj:
    """A minimal valid pod; `node_name` makes graceful deletion wait for a (missing) kubelet."""
    meta: JsonObj = {"name": name}
    if generate_name is not None:
        meta = {"generateName": generate_name}
    if namespace is not None:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = dict(labels)
    if finalizers:
        meta["finalizers"] = list(finalizers)
    spec: JsonObj = {
        "containers": [{"name": c, "image": f"busybox:{c}"} for c in containers],
    }
    if node_name is not None:
        spec["nodeName"] = node_name
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def configmap(
    name: str,
    namespace: str | None,
    *,
    labels: Mapping[str, str] | None = None,
    finalizers: Sequence[str] | None = None,
    data: Mapping[str, str] | None = None,
) -> JsonObj:
    meta: JsonObj = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = dict(labels)
    if finalizers:
        meta["finalizers"] = list(finalizers)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": dict(data or {})}


def job(name: str, namespace: str, *, parallelism: int = 1) -> JsonObj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "parallelism": parallelism,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox"}],
                }
            },
        },
    }


def appwrapper(
    name: str,
    namespace: str | None,
    *,
    labels: Mapping[str, str] | None = None,
    status: JsonObj | None = None,
) -> JsonObj:
    """The sample MCAD v1 AppWrapper from data/appwrapper-sample.yaml, renamed."""
    obj: JsonObj = yaml.safe_load((DATA / "appwrapper-sample.yaml").read_text())
    obj["metadata"]["name"] = name
    if namespace is not None:
        obj["metadata"]["namespace"] = namespace
    if labels is not None:
        obj["metadata"]["labels"] = dict(labels)
    if status is not None:
        obj["status"] = status
    return obj


def load_crd() -> JsonObj:
    crd: JsonObj = yaml.safe_load(CRD_FILE.read_text())
    return crd


# ----------------------------------------------------------------------------------------------
# Outcomes


@dataclass
class Outcome:
    """What a client got back: the object on success, or the failure as the client reports it.

    `code`/`reason` are None when the client cannot report them (kubectl prints no code, and
    prints no reason for some client-side wrapped errors)."""

    ok: bool
    obj: JsonObj | None = None
    code: int | None = None
    reason: str | None = None
    message: str = ""
    status: JsonObj | None = None  # the full Status body when the client exposes it

    def value(self) -> JsonObj:
        assert self.ok, f"expected success, got {self.code} {self.reason}: {self.message}"
        assert self.obj is not None
        return self.obj

    def expect_failure(self, *, code: int, reason: str, message: str | None = None) -> None:
        """Assert the failure; `message` is a fragment of what the client shows."""
        assert not self.ok, f"expected {code} {reason}, got success: {self.obj}"
        if self.code is not None:
            assert self.code == code, f"code {self.code} != {code}: {self.message}"
        if self.reason is not None:
            assert self.reason == reason, f"reason {self.reason} != {reason}: {self.message}"
        if message is not None:
            assert message in self.message, f"{message!r} not in {self.message!r}"


def status_from_exception(exc: ApiException) -> Outcome:
    body = exc.body
    text = body.decode() if isinstance(body, bytes) else str(body or "")
    try:
        status = json.loads(text)
    except ValueError:
        return Outcome(ok=False, code=exc.status, message=text)
    if not isinstance(status, dict):
        return Outcome(ok=False, code=exc.status, message=text)
    return Outcome(
        ok=False,
        code=exc.status,
        reason=status.get("reason"),
        message=str(status.get("message", "")),
        status=status,
    )


_KUBECTL_SERVER_ERROR = re.compile(r"Error from server \((?P<reason>\w+)\): (?P<msg>.*)", re.S)
_KUBECTL_WHEN = re.compile(r'^error when \w+ "[^"]*": ')
_KUBECTL_INVALID = re.compile(r'The (?P<kind>\S+) "(?P<name>[^"]*)" is invalid: (?P<msg>.*)', re.S)


def outcome_from_kubectl(proc: subprocess.CompletedProcess[str]) -> Outcome:
    """kubectl prints `Error from server (Reason): message` or `The Kind "x" is invalid: …`."""
    if proc.returncode == 0:
        text = proc.stdout.strip()
        obj = json.loads(text) if text.startswith("{") else None
        return Outcome(ok=True, obj=obj, message=text)
    err = proc.stderr.strip()
    if m := _KUBECTL_SERVER_ERROR.search(err):
        reason = m["reason"]
        return Outcome(
            ok=False,
            code=REASON_CODES.get(reason),
            reason=reason,
            message=_KUBECTL_WHEN.sub("", m["msg"].strip()),
        )
    if m := _KUBECTL_INVALID.search(err):
        return Outcome(ok=False, code=422, reason="Invalid", message=err)
    return Outcome(ok=False, message=err)


# ----------------------------------------------------------------------------------------------
# The server under test, on its own event loop thread


class ServerHandle(BackgroundApiServer):
    """An in-process kubesim ApiServer running on a private event-loop thread.

    A private loop lets one server serve a whole test module (sync kubectl tests and async tests,
    each with their own function-scoped loop) without pytest-asyncio loop-scope coupling."""

    def _call(self, coro: Awaitable[T], timeout: float = 15.0) -> T:
        return self.call(coro, timeout)

    # -- synchronous raw HTTP, for fixtures and admin hooks --------------------------------

    def request(
        self, method: str, path: str, body: JsonObj | None = None, content_type: str | None = None
    ) -> tuple[int, JsonObj]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Content-Type", content_type or "application/json")
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

    def create(self, path: str, body: JsonObj) -> JsonObj:
        code, obj = self.request("POST", path, body)
        assert code == 201, f"POST {path} → {code} {obj}"
        return obj

    def compact(self) -> None:
        code, obj = self.request("POST", "/kubesim/v1/compact", {})
        assert code < 300, f"compact → {code} {obj}"

    def drop_watches(self) -> None:
        code, obj = self.request("POST", "/kubesim/v1/drop-watches", {})
        assert code < 300, f"drop-watches → {code} {obj}"

    def fail(self, path: str, code: int, *, count: int = 1, latency: float = 0.0) -> None:
        body = {"path": path, "code": code, "count": count, "latency": latency}
        status, obj = self.request("POST", "/kubesim/v1/fail", body)
        assert status < 300, f"fail → {status} {obj}"

    def register_crd(self, crd: JsonObj, *, timeout: float = 5.0) -> None:
        """POST the CRD and wait until its group/version lists the plural (reference §2.11)."""
        code, obj = self.request(
            "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd
        )
        assert code in (201, 409), f"CRD create → {code} {obj}"
        group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
        version = crd["spec"]["versions"][0]["name"]
        wait_until(
            lambda: any(
                r.get("name") == plural
                for r in self.request("GET", f"/apis/{group}/{version}")[1].get("resources", [])
            ),
            timeout=timeout,
            what=f"{plural}.{group} to be served",
        )

    def make_namespace(self, name: str) -> str:
        self.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        )
        return name


# ----------------------------------------------------------------------------------------------
# Raw async HTTP (wire-level checks: exact bodies, headers, watch framing)


@dataclass
class RawResponse:
    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class WatchResult:
    status: int
    headers: Mapping[str, str]
    events: list[JsonObj] = field(default_factory=list)
    raw_lines: list[bytes] = field(default_factory=list)
    eof: bool = False  # the server ended the body (as opposed to our read deadline)


class Http:
    """Plain aiohttp against the server, for checks that must see the wire."""

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self.session = session
        self.url = url

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json_body: Any = None,
        data: bytes | None = None,
        content_type: str = "application/json",
        headers: Mapping[str, str] | None = None,
    ) -> RawResponse:
        hdrs = {"Accept": "application/json", **(headers or {})}
        payload = data
        if json_body is not None:
            payload = json.dumps(json_body).encode()
        if payload is not None:
            hdrs["Content-Type"] = content_type
        async with self.session.request(
            method, self.url + path, params=params, data=payload, headers=hdrs
        ) as resp:
            return RawResponse(resp.status, dict(resp.headers), await resp.read())

    async def watch(
        self,
        path: str,
        params: Mapping[str, str],
        *,
        max_events: int | None = None,
        until: Callable[[JsonObj], bool] | None = None,
        timeout: float = 5.0,
        after_open: Callable[[], Awaitable[None]] | None = None,
    ) -> WatchResult:
        """Read newline-delimited events until `max_events`, `until(event)`, EOF or `timeout`."""
        result: WatchResult
        try:
            async with asyncio.timeout(timeout + 5):
                async with self.session.get(
                    self.url + path,
                    params=params,
                    headers={"Accept": "application/json"},
                    timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
                ) as resp:
                    result = WatchResult(resp.status, dict(resp.headers))
                    if resp.status != 200:
                        result.raw_lines.append(await resp.read())
                        return result
                    if after_open is not None:
                        await after_open()
                    deadline = time.monotonic() + timeout
                    while True:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            return result
                        try:
                            line = await asyncio.wait_for(resp.content.readline(), remaining)
                        except TimeoutError:
                            return result
                        if not line:
                            result.eof = True
                            return result
                        result.raw_lines.append(line)
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        result.events.append(event)
                        if max_events is not None and len(result.events) >= max_events:
                            return result
                        if until is not None and until(event):
                            return result
        except TimeoutError as exc:
            raise AssertionError(f"watch {path} did not answer") from exc


# ----------------------------------------------------------------------------------------------
# kubectl


class Kubectl:
    """kubectl v1.32 as a real client, always with our kubeconfig and a per-server cache dir."""

    def __init__(self, kubeconfig: Path, cache_dir: Path) -> None:
        self.base = ["kubectl", "--kubeconfig", str(kubeconfig), "--cache-dir", str(cache_dir)]

    def run(
        self, *args: str, stdin: str | None = None, timeout: float = 30.0
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.base, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def ok(self, *args: str, stdin: str | None = None) -> str:
        proc = self.run(*args, stdin=stdin)
        assert proc.returncode == 0, f"kubectl {' '.join(args)} failed: {proc.stderr}"
        return proc.stdout

    def json(self, *args: str, stdin: str | None = None) -> JsonObj:
        out: JsonObj = json.loads(self.ok(*args, "-o", "json", stdin=stdin))
        return out

    async def arun(
        self, *args: str, stdin: str | None = None, timeout: float = 30.0
    ) -> subprocess.CompletedProcess[str]:
        proc = await asyncio.create_subprocess_exec(
            *self.base,
            *args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(
                proc.communicate(stdin.encode() if stdin is not None else None), timeout
            )
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
        assert proc.returncode is not None
        return subprocess.CompletedProcess(
            [*self.base, *args], proc.returncode, out.decode(), err.decode()
        )

    @contextlib.asynccontextmanager
    async def watch(self, *args: str) -> AsyncIterator[WatchLines]:
        """Start `kubectl … -w`, hand back a line reader, kill the process on exit."""
        proc = await asyncio.create_subprocess_exec(
            *self.base, *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        try:
            yield WatchLines(proc)
        finally:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()


class WatchLines:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []

    async def read_until(self, predicate: Callable[[str], bool], *, timeout: float = 10.0) -> str:
        """Read stdout lines until one satisfies `predicate`; fail with what was seen."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                raw = await asyncio.wait_for(self.proc.stdout.readline(), remaining)
            except TimeoutError:
                break
            if not raw:
                break
            line = raw.decode().rstrip("\n")
            self.lines.append(line)
            if predicate(line):
                return line
        err = b""
        if self.proc.stderr is not None and self.proc.returncode is not None:
            err = await self.proc.stderr.read()
        raise AssertionError(f"kubectl watch never matched; saw {self.lines!r} {err.decode()}")

    async def read_json_objects(
        self, predicate: Callable[[JsonObj], bool], *, timeout: float = 10.0
    ) -> JsonObj:
        """For `-o json` watches: kubectl prints pretty JSON documents back to back."""
        assert self.proc.stdout is not None
        buf = ""
        decoder = json.JSONDecoder()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                raw = await asyncio.wait_for(
                    self.proc.stdout.readline(), deadline - time.monotonic()
                )
            except TimeoutError:
                break
            if not raw:
                break
            buf += raw.decode()
            while buf.strip():
                try:
                    obj, end = decoder.raw_decode(buf.lstrip())
                except ValueError:
                    break
                buf = buf.lstrip()[end:]
                if predicate(obj):
                    return dict(obj)
        raise AssertionError(f"kubectl watch never produced a matching object; rest: {buf!r}")


# ----------------------------------------------------------------------------------------------
# The client abstraction


class Client(Protocol):
    """One way of talking to the API server; every method reports an Outcome, never raises."""

    name: str

    async def create(self, obj: JsonObj) -> Outcome: ...

    async def get(self, plural: str, name: str, namespace: str) -> Outcome: ...

    async def list(
        self,
        plural: str,
        namespace: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Outcome: ...

    async def patch(
        self,
        plural: str,
        name: str,
        namespace: str,
        body: Any,
        *,
        patch_type: PatchType,
        subresource: str | None = None,
    ) -> Outcome: ...

    async def delete(
        self, plural: str, name: str, namespace: str, *, grace_period: int | None = None
    ) -> Outcome: ...


def _plural_of(obj: JsonObj) -> Kind:
    for kind in KINDS.values():
        if kind.kind == obj["kind"] and kind.api_version == obj["apiVersion"]:
            return kind
    raise KeyError(f"no Kind entry for {obj['apiVersion']} {obj['kind']}")


class TypedClient:
    """CoreV1Api / BatchV1Api / CoordinationV1Api for built-ins, CustomObjectsApi for CRs."""

    name = "typed"

    def __init__(self, api: k8s.ApiClient) -> None:
        self.api = api

    def _typed(self, kind: Kind) -> Any:
        return getattr(k8s, kind.typed_api)(self.api)

    def _custom(self) -> k8s.CustomObjectsApi:
        return k8s.CustomObjectsApi(self.api)

    def _dict(self, result: Any) -> JsonObj:
        if isinstance(result, dict):
            return result
        out: JsonObj = self.api.sanitize_for_serialization(result)
        return out

    async def _run(self, call: Awaitable[Any]) -> Outcome:
        try:
            return Outcome(ok=True, obj=self._dict(await call))
        except ApiException as exc:
            return status_from_exception(exc)

    async def create(self, obj: JsonObj) -> Outcome:
        kind = _plural_of(obj)
        ns = obj["metadata"]["namespace"]
        if kind.typed_api == "custom":
            return await self._run(
                self._custom().create_namespaced_custom_object(
                    AW_GROUP, AW_VERSION, ns, kind.plural, obj
                )
            )
        method = getattr(self._typed(kind), f"create_namespaced_{kind.typed_name}")
        return await self._run(method(ns, obj))

    async def get(self, plural: str, name: str, namespace: str) -> Outcome:
        kind = KINDS[plural]
        if kind.typed_api == "custom":
            return await self._run(
                self._custom().get_namespaced_custom_object(
                    AW_GROUP, AW_VERSION, namespace, plural, name
                )
            )
        method = getattr(self._typed(kind), f"read_namespaced_{kind.typed_name}")
        return await self._run(method(name, namespace))

    async def list(
        self,
        plural: str,
        namespace: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Outcome:
        kind = KINDS[plural]
        kw: dict[str, Any] = {}
        if label_selector is not None:
            kw["label_selector"] = label_selector
        if field_selector is not None:
            kw["field_selector"] = field_selector
        if kind.typed_api == "custom":
            return await self._run(
                self._custom().list_namespaced_custom_object(
                    AW_GROUP, AW_VERSION, namespace, plural, **kw
                )
            )
        method = getattr(self._typed(kind), f"list_namespaced_{kind.typed_name}")
        return await self._run(method(namespace, **kw))

    async def patch(
        self,
        plural: str,
        name: str,
        namespace: str,
        body: Any,
        *,
        patch_type: PatchType,
        subresource: str | None = None,
    ) -> Outcome:
        kind = KINDS[plural]
        suffix = f"_{subresource}" if subresource else ""
        # The typed client picks JSON patch for lists and SMP for dicts on built-ins (§4.2);
        # anything else must be asked for explicitly.
        kw: dict[str, Any] = {}
        if patch_type == "merge" or kind.typed_api == "custom":
            kw["_content_type"] = CONTENT_TYPES[patch_type]
        if kind.typed_api == "custom":
            method = getattr(self._custom(), f"patch_namespaced_custom_object{suffix}")
            return await self._run(
                method(AW_GROUP, AW_VERSION, namespace, plural, name, body, **kw)
            )
        method = getattr(self._typed(kind), f"patch_namespaced_{kind.typed_name}{suffix}")
        return await self._run(method(name, namespace, body, **kw))

    async def delete(
        self, plural: str, name: str, namespace: str, *, grace_period: int | None = None
    ) -> Outcome:
        kind = KINDS[plural]
        kw: dict[str, Any] = {}
        if grace_period is not None:
            kw["grace_period_seconds"] = grace_period
        if kind.typed_api == "custom":
            return await self._run(
                self._custom().delete_namespaced_custom_object(
                    AW_GROUP, AW_VERSION, namespace, plural, name, **kw
                )
            )
        method = getattr(self._typed(kind), f"delete_namespaced_{kind.typed_name}")
        return await self._run(method(name, namespace, **kw))


class DynClient:
    """kubernetes_asyncio.dynamic.DynamicClient: everything found through discovery."""

    name = "dynamic"

    def __init__(self, dyn: DynamicClient) -> None:
        self.dyn = dyn

    async def _resource(self, kind: Kind) -> Any:
        return await self.dyn.resources.get(api_version=kind.api_version, kind=kind.kind)

    @staticmethod
    async def _run(call: Awaitable[Any]) -> Outcome:
        try:
            result = await call
        except ApiException as exc:
            return status_from_exception(exc)
        obj = result.to_dict() if hasattr(result, "to_dict") else result
        # kubernetes_asyncio 36's DynamicClient.request() uses _preload_content=False, so the
        # REST layer never raises: an error comes back as a Status "object" (see FINDINGS.md).
        if isinstance(obj, dict) and obj.get("kind") == "Status" and obj.get("status") == "Failure":
            return Outcome(
                ok=False,
                code=obj.get("code"),
                reason=obj.get("reason"),
                message=str(obj.get("message", "")),
                status=obj,
            )
        return Outcome(ok=True, obj=obj)

    async def create(self, obj: JsonObj) -> Outcome:
        res = await self._resource(_plural_of(obj))
        return await self._run(
            self.dyn.create(res, body=obj, namespace=obj["metadata"]["namespace"])
        )

    async def get(self, plural: str, name: str, namespace: str) -> Outcome:
        res = await self._resource(KINDS[plural])
        return await self._run(self.dyn.get(res, name=name, namespace=namespace))

    async def list(
        self,
        plural: str,
        namespace: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Outcome:
        res = await self._resource(KINDS[plural])
        return await self._run(
            self.dyn.get(
                res,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
            )
        )

    async def patch(
        self,
        plural: str,
        name: str,
        namespace: str,
        body: Any,
        *,
        patch_type: PatchType,
        subresource: str | None = None,
    ) -> Outcome:
        res = await self._resource(KINDS[plural])
        if subresource:
            res = res.subresources[subresource]
        return await self._run(
            self.dyn.patch(
                res,
                body=body,
                name=name,
                namespace=namespace,
                content_type=CONTENT_TYPES[patch_type],
            )
        )

    async def delete(
        self, plural: str, name: str, namespace: str, *, grace_period: int | None = None
    ) -> Outcome:
        res = await self._resource(KINDS[plural])
        kw: dict[str, Any] = {}
        if grace_period is not None:
            kw["grace_period_seconds"] = grace_period
        return await self._run(self.dyn.delete(res, name=name, namespace=namespace, **kw))


class KubectlClient:
    """kubectl create/get/patch/delete; `delete` with grace 0 means `--grace-period=0 --force`."""

    name = "kubectl"

    def __init__(self, kubectl: Kubectl) -> None:
        self.kubectl = kubectl

    async def _run(self, *args: str, stdin: str | None = None) -> Outcome:
        return outcome_from_kubectl(await self.kubectl.arun(*args, stdin=stdin))

    async def create(self, obj: JsonObj) -> Outcome:
        return await self._run("create", "-f", "-", "-o", "json", stdin=json.dumps(obj))

    async def get(self, plural: str, name: str, namespace: str) -> Outcome:
        return await self._run(
            "get", KINDS[plural].kubectl_name, name, "-n", namespace, "-o", "json"
        )

    async def list(
        self,
        plural: str,
        namespace: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Outcome:
        args = ["get", KINDS[plural].kubectl_name, "-n", namespace, "-o", "json"]
        if label_selector is not None:
            args += ["-l", label_selector]
        if field_selector is not None:
            args += ["--field-selector", field_selector]
        return await self._run(*args)

    async def patch(
        self,
        plural: str,
        name: str,
        namespace: str,
        body: Any,
        *,
        patch_type: PatchType,
        subresource: str | None = None,
    ) -> Outcome:
        args = ["patch", KINDS[plural].kubectl_name, name, "-n", namespace]
        args += ["--type", patch_type, "-p", json.dumps(body), "-o", "json"]
        if subresource:
            args += ["--subresource", subresource]
        return await self._run(*args)

    async def delete(
        self, plural: str, name: str, namespace: str, *, grace_period: int | None = None
    ) -> Outcome:
        args = ["delete", KINDS[plural].kubectl_name, name, "-n", namespace, "--wait=false"]
        if grace_period is not None:
            args.append(f"--grace-period={grace_period}")
            if grace_period == 0:
                args.append("--force")
        return await self._run(*args)


def names(items: Iterator[JsonObj] | Sequence[JsonObj]) -> list[str]:
    return [i["metadata"]["name"] for i in items]

"""Decoding of the Kubernetes protobuf envelope for the few kinds kubectl's generators send.

`kubectl create namespace|configmap|secret|serviceaccount …` use client-go typed clients,
which POST `application/vnd.kubernetes.protobuf`: the magic `k8s\\x00`, then a
`runtime.Unknown{typeMeta, raw}` whose `raw` is the object in the generated.proto encoding.
Only the kinds below are understood (field numbers from k8s.io/api core/v1 generated.proto);
anything else is answered 415 by the caller. Responses are always JSON, which those clients
accept.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from typing import Any

MAGIC = b"k8s\x00"
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"


class ProtobufError(ValueError):
    """Bytes that are not a Kubernetes protobuf object of a supported kind."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ProtobufError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) pairs; varints as int, length-delimited as bytes."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            yield number, value
        elif wire == 2:
            length, pos = _varint(data, pos)
            yield number, data[pos : pos + length]
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")


def _text(value: int | bytes) -> str:
    if isinstance(value, int):
        raise ProtobufError("expected a string")
    return value.decode()


def _raw(value: int | bytes) -> bytes:
    if isinstance(value, int):
        raise ProtobufError("expected bytes")
    return value


def _map_entry(value: int | bytes) -> tuple[str, bytes]:
    key, val = "", b""
    for number, v in _fields(_raw(value)):
        if number == 1:
            key = _text(v)
        elif number == 2:
            val = _raw(v)
    return key, val


def _object_meta(data: bytes) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for number, value in _fields(data):
        if number == 1:
            meta["name"] = _text(value)
        elif number == 2:
            meta["generateName"] = _text(value)
        elif number == 3:
            meta["namespace"] = _text(value)
        elif number == 6:
            meta["resourceVersion"] = _text(value)
        elif number in (11, 12):
            key, val = _map_entry(value)
            meta.setdefault("labels" if number == 11 else "annotations", {})[key] = val.decode()
        elif number == 14:
            meta.setdefault("finalizers", []).append(_text(value))
    return meta


def _namespace(data: bytes) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for number, value in _fields(data):
        if number == 1:
            obj["metadata"] = _object_meta(_raw(value))
        elif number == 2:
            finalizers = [_text(v) for n, v in _fields(_raw(value)) if n == 1]
            if finalizers:
                obj["spec"] = {"finalizers": finalizers}
    return obj


def _configmap(data: bytes) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for number, value in _fields(data):
        if number == 1:
            obj["metadata"] = _object_meta(_raw(value))
        elif number == 2:
            key, val = _map_entry(value)
            obj.setdefault("data", {})[key] = val.decode()
        elif number == 3:
            key, val = _map_entry(value)
            obj.setdefault("binaryData", {})[key] = base64.b64encode(val).decode()
        elif number == 4:
            obj["immutable"] = bool(value)
    return obj


def _secret(data: bytes) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for number, value in _fields(data):
        if number == 1:
            obj["metadata"] = _object_meta(_raw(value))
        elif number == 2:
            key, val = _map_entry(value)
            obj.setdefault("data", {})[key] = base64.b64encode(val).decode()
        elif number == 3:
            obj["type"] = _text(value)
        elif number == 4:
            key, val = _map_entry(value)
            obj.setdefault("stringData", {})[key] = val.decode()
        elif number == 5:
            obj["immutable"] = bool(value)
    return obj


def _service_account(data: bytes) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for number, value in _fields(data):
        if number == 1:
            obj["metadata"] = _object_meta(_raw(value))
        elif number == 4:
            obj["automountServiceAccountToken"] = bool(value)
    return obj


_DECODERS: dict[tuple[str, str], Callable[[bytes], dict[str, Any]]] = {
    ("v1", "Namespace"): _namespace,
    ("v1", "ConfigMap"): _configmap,
    ("v1", "Secret"): _secret,
    ("v1", "ServiceAccount"): _service_account,
}


def decode(body: bytes) -> dict[str, Any]:
    """The JSON-shaped object inside a protobuf request body (supported kinds only)."""
    if not body.startswith(MAGIC):
        raise ProtobufError("missing the k8s protobuf magic prefix")
    api_version = kind = ""
    raw = b""
    for number, value in _fields(body[len(MAGIC) :]):
        if number == 1:
            for n, v in _fields(_raw(value)):
                if n == 1:
                    api_version = _text(v)
                elif n == 2:
                    kind = _text(v)
        elif number == 2:
            raw = _raw(value)
    decoder = _DECODERS.get((api_version, kind))
    if decoder is None:
        raise ProtobufError(f"protobuf decoding of {api_version}/{kind} is not supported")
    obj = decoder(raw)
    obj["apiVersion"] = api_version
    obj["kind"] = kind
    return obj

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
from collections.abc import Callable, Iterator, Mapping
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


Reader = Callable[[dict[str, Any], int | bytes], None]
"""Reads one field's value into the object being decoded."""


def _message(readers: Mapping[int, Reader]) -> Callable[[bytes], dict[str, Any]]:
    """A decoder of one message: each field number it knows is read by its reader."""

    def decode(data: bytes) -> dict[str, Any]:
        obj: dict[str, Any] = {}
        for number, value in _fields(data):
            read = readers.get(number)
            if read is not None:
                read(obj, value)
        return obj

    return decode


def _scalar(key: str, convert: Callable[[int | bytes], Any]) -> Reader:
    def read(obj: dict[str, Any], value: int | bytes) -> None:
        obj[key] = convert(value)

    return read


def _entry(key: str, convert: Callable[[bytes], str] = bytes.decode) -> Reader:
    """A map field: each occurrence is one key/value entry of `obj[key]`."""

    def read(obj: dict[str, Any], value: int | bytes) -> None:
        name, val = _map_entry(value)
        obj.setdefault(key, {})[name] = convert(val)

    return read


def _base64(value: bytes) -> str:
    return base64.b64encode(value).decode()


def _namespace_spec(obj: dict[str, Any], value: int | bytes) -> None:
    finalizers = [_text(v) for n, v in _fields(_raw(value)) if n == 1]
    if finalizers:
        obj["spec"] = {"finalizers": finalizers}


def _finalizer(obj: dict[str, Any], value: int | bytes) -> None:
    obj.setdefault("finalizers", []).append(_text(value))


_object_meta = _message(
    {
        1: _scalar("name", _text),
        2: _scalar("generateName", _text),
        3: _scalar("namespace", _text),
        6: _scalar("resourceVersion", _text),
        11: _entry("labels"),
        12: _entry("annotations"),
        14: _finalizer,
    }
)
_METADATA = _scalar("metadata", lambda value: _object_meta(_raw(value)))
_IMMUTABLE = _scalar("immutable", bool)

_DECODERS: dict[tuple[str, str], Callable[[bytes], dict[str, Any]]] = {
    ("v1", "Namespace"): _message({1: _METADATA, 2: _namespace_spec}),
    ("v1", "ConfigMap"): _message(
        {1: _METADATA, 2: _entry("data"), 3: _entry("binaryData", _base64), 4: _IMMUTABLE}
    ),
    ("v1", "Secret"): _message(
        {
            1: _METADATA,
            2: _entry("data", _base64),
            3: _scalar("type", _text),
            4: _entry("stringData"),
            5: _IMMUTABLE,
        }
    ),
    ("v1", "ServiceAccount"): _message(
        {1: _METADATA, 4: _scalar("automountServiceAccountToken", bool)}
    ),
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

"""`metav1.Status` objects and the typed error that carries them to the HTTP boundary.

The constructors mirror apimachinery's `pkg/api/errors` so messages, reasons and details
match what real clients parse (reference §2.10).
"""

from __future__ import annotations

import json
from typing import Any

from kubesim.resources import ResourceType

Cause = dict[str, str]

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def reason_for_code(code: int) -> str:
    return _REASONS.get(code, "Unknown")


class ApiError(Exception):
    """An API failure answered as a Status object with an HTTP code."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.warnings: list[str] = []

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if self.details is not None:
            out["details"] = self.details
        out["code"] = self.code
        return out


def _details(rt: ResourceType | None, name: str, **extra: Any) -> dict[str, Any]:
    d: dict[str, Any] = {}
    if name:
        d["name"] = name
    if rt is not None:
        if rt.group:
            d["group"] = rt.group
        d["kind"] = rt.plural
    d.update(extra)
    return d


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{rt.group_resource} "{name}" not found', _details(rt, name))


def namespace_not_found(namespace: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'namespaces "{namespace}" not found',
        {"name": namespace, "kind": "namespaces"},
    )


def path_not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def already_exists(rt: ResourceType, name: str, *, deleting: bool) -> ApiError:
    message = f'{rt.group_resource} "{name}" already exists'
    if deleting:
        message = "object is being deleted: " + message
    return ApiError(409, "AlreadyExists", message, _details(rt, name))


def conflict(rt: ResourceType, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {rt.group_resource} "{name}": {why}',
        _details(rt, name),
    )


def kind_conflict(rt: ResourceType, name: str, why: str) -> ApiError:
    """NewConflict with GroupResource{group, Kind} as rest.BeforeDelete builds it."""
    qualified = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
    details: dict[str, Any] = {"name": name}
    if rt.group:
        details["group"] = rt.group
    details["kind"] = rt.kind
    return ApiError(
        409, "Conflict", f'Operation cannot be fulfilled on {qualified} "{name}": {why}', details
    )


MODIFIED_MESSAGE = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def modified_conflict(rt: ResourceType, name: str) -> ApiError:
    return conflict(rt, name, MODIFIED_MESSAGE)


def field_error(reason: str, field: str, message: str) -> Cause:
    return {"reason": reason, "message": message, "field": field}


def required(field: str, detail: str = "") -> Cause:
    msg = "Required value" + (f": {detail}" if detail else "")
    return field_error("FieldValueRequired", field, msg)


def invalid_value(field: str, value: Any, detail: str) -> Cause:
    return field_error("FieldValueInvalid", field, f"Invalid value: {go_value(value)}: {detail}")


def forbidden_field(field: str, detail: str) -> Cause:
    return field_error("FieldValueForbidden", field, f"Forbidden: {detail}")


def not_supported(field: str, value: Any, supported: list[str]) -> Cause:
    vals = ", ".join(f'"{s}"' for s in supported)
    return field_error(
        "FieldValueNotSupported",
        field,
        f"Unsupported value: {go_value(value)}: supported values: {vals}",
    )


def go_value(value: Any) -> str:
    """A bad value as apimachinery's `field.Error.ErrorBody` prints it.

    Strings are Go-quoted (`%q`), ints, floats and bools use `%v`, null is `null`, and
    anything else (objects, lists) is `json.Marshal`ed (sorted keys, compact), as in
    k8s.io/apimachinery/pkg/util/validation/field/errors.go.
    """
    if isinstance(value, str):
        return go_quote(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def go_quote(text: str) -> str:
    """Go's `strconv.Quote` for the characters that matter here."""
    out = ['"']
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def go_float(value: float) -> str:
    """Go's `%v` of a float64 (`FormatFloat(f, 'g', -1, 64)`): `1.5`, `100000`, `1e+06`."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    # repr gives the shortest round-trip digits, as Go's shortest formatting does.
    mantissa, _, exp_text = repr(abs(value)).partition("e")
    whole, _, frac = mantissa.partition(".")
    raw = whole + frac
    digits = raw.lstrip("0")
    dp = len(whole) - (len(raw) - len(digits)) + (int(exp_text) if exp_text else 0)
    digits = digits.rstrip("0") or "0"
    exp = dp - 1
    if exp < -4 or exp >= 6:  # shortest %g switches to %e outside [1e-4, 1e6)
        tail = digits[1:]
        body = digits[0] + ("." + tail if tail else "")
        return f"{sign}{body}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if dp <= 0:
        return f"{sign}0.{'0' * -dp}{digits}"
    if dp >= len(digits):
        return f"{sign}{digits}{'0' * (dp - len(digits))}"
    return f"{sign}{digits[:dp]}.{digits[dp:]}"


def type_invalid(field: str, value: Any, detail: str) -> Cause:
    """field.TypeInvalid: the value's JSON type is not the schema's (CR schema validation)."""
    return field_error(
        "FieldValueTypeInvalid", field, f"Invalid value: {go_value(value)}: {detail}"
    )


def too_long(field: str, max_length: int) -> Cause:
    """field.TooLong: the value itself is omitted from the message."""
    unit = "byte" if max_length == 1 else "bytes"
    return field_error(
        "FieldValueTooLong", field, f"Too long: may not be more than {max_length} {unit}"
    )


def too_many(field: str, actual: int, maximum: int) -> Cause:
    unit = "item" if maximum == 1 else "items"
    return field_error(
        "FieldValueTooMany", field, f"Too many: {actual}: must have at most {maximum} {unit}"
    )


def duplicate(field: str, value: Any) -> Cause:
    return field_error("FieldValueDuplicate", field, f"Duplicate value: {go_value(value)}")


def qualified_kind(rt: ResourceType) -> str:
    """schema.GroupKind.String(): `Pod`, `Job.batch`, `AppWrapper.workload.codeflare.dev`."""
    return f"{rt.kind}.{rt.group}" if rt.group else rt.kind


def invalid(rt: ResourceType, name: str, causes: list[Cause]) -> ApiError:
    """422 Invalid, shaped like apimachinery `errors.NewInvalid`.

    The message is `<Kind>[.<group>] "<name>" is invalid: <aggregate>`, the aggregate being
    the one error or `[e1, e2, ...]` (utilerrors.NewAggregate), each `<field>: <body>`;
    `details` carry the name, the group (omitted for core), the Kind and one cause per error
    (`reason` = field.ErrorType, `message` = ErrorBody, `field`).
    Source: k8s.io/apimachinery/pkg/api/errors/errors.go NewInvalid.
    """
    parts: list[str] = []
    for c in causes:
        part = f"{c['field']}: {c['message']}"
        if part not in parts:  # the aggregate drops duplicate messages
            parts.append(part)
    joined = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    details: dict[str, Any] = {"name": name}
    if rt.group:
        details["group"] = rt.group
    details["kind"] = rt.kind
    details["causes"] = causes
    return ApiError(422, "Invalid", f'{qualified_kind(rt)} "{name}" is invalid: {joined}', details)


def patch_invalid(bad_value: str, detail: str) -> ApiError:
    """A patch whose result does not decode: NewInvalid(GroupKind{}, "", [patch: ...]).

    The real handler (apiserver endpoints/handlers/patch.go) reports the patched object (JSON
    and merge patch) or the patch map (strategic merge) as the bad value, with an empty kind
    and name, hence the message's odd start.
    """
    cause = invalid_value("patch", bad_value, detail)
    return ApiError(
        422,
        "Invalid",
        f' "" is invalid: patch: {cause["message"]}',
        {"causes": [cause]},
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def unprocessable(message: str) -> ApiError:
    """NewGenericServerResponse(422, ...) as used for failed JSON-patch operations."""
    return ApiError(
        422,
        "Invalid",
        "the server rejected our request due to an error in our request",
        {"causes": [{"reason": "UnexpectedServerResponse", "message": message}]},
    )


def forbidden(rt: ResourceType, name: str, why: str, causes: list[Cause] | None = None) -> ApiError:
    details = _details(rt, name)
    if causes:
        details["causes"] = causes
    label = f'{rt.group_resource} "{name}"' if name else rt.group_resource
    return ApiError(403, "Forbidden", f"{label} is forbidden: {why}", details)


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def too_old_resource_version(requested: int, oldest: int) -> ApiError:
    return expired(f"too old resource version: {requested} ({oldest})")


def method_not_allowed() -> ApiError:
    return ApiError(
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
        {},
    )


UNSUPPORTED_PATCH_MESSAGE = (
    "the body of the request was in an unknown format - accepted media types include: "
    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
)


def unsupported_media_type(message: str = UNSUPPORTED_PATCH_MESSAGE) -> ApiError:
    return ApiError(415, "UnsupportedMediaType", message, {})


def injected(code: int, message: str, *, retry_after: int | None = None) -> ApiError:
    """An injected failure; `retry_after` adds `details.retryAfterSeconds` (the HTTP layer
    then sends `Retry-After`), as apimachinery's NewTooManyRequests / NewServerTimeout do."""
    details: dict[str, Any] = {}
    if retry_after is not None and retry_after > 0:
        details["retryAfterSeconds"] = retry_after
    return ApiError(code, reason_for_code(code), message, details)


def success(rt: ResourceType, name: str, uid: str) -> dict[str, Any]:
    """Status Success answered by DELETE for types that do not return the deleted object."""
    details: dict[str, Any] = {"name": name}
    if rt.group:
        details["group"] = rt.group
    details["kind"] = rt.plural
    details["uid"] = uid
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    }


def created() -> dict[str, Any]:
    """Status Success with code 201, answered by the pods/binding and pods/eviction posts."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

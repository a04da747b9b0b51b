"""`metav1.Status` objects and the typed error that carries them to the HTTP boundary.

The constructors mirror apimachinery's `pkg/api/errors` so messages, reasons and details
match what real clients parse (reference §2.10).
"""

from __future__ import annotations

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
    return field_error("FieldValueInvalid", field, f"Invalid value: {_go_repr(value)}: {detail}")


def forbidden_field(field: str, detail: str) -> Cause:
    return field_error("FieldValueForbidden", field, f"Forbidden: {detail}")


def not_supported(field: str, value: Any, supported: list[str]) -> Cause:
    vals = ", ".join(f'"{s}"' for s in supported)
    return field_error(
        "FieldValueNotSupported",
        field,
        f"Unsupported value: {_go_repr(value)}: supported values: {vals}",
    )


def _go_repr(value: Any) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def invalid(rt: ResourceType, name: str, causes: list[Cause]) -> ApiError:
    """422 Invalid, shaped like apimachinery NewInvalid (details.kind is the Kind)."""
    parts = [f"{c['field']}: {c['message']}" for c in causes]
    joined = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    details: dict[str, Any] = {"name": name}
    if rt.group:
        details["group"] = rt.group
    details["kind"] = rt.kind
    details["causes"] = causes
    return ApiError(422, "Invalid", f'{rt.kind} "{name}" is invalid: {joined}', details)


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


def injected(code: int, message: str) -> ApiError:
    return ApiError(code, reason_for_code(code), message, {})


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

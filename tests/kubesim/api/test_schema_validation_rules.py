"""Custom-resource schema validation and coercion as pure functions (no server).

The expected messages are the real API server's: kube-openapi's validator messages
(k8s.io/kube-openapi pkg/validation/errors/schema.go), turned into field errors by
apiextensions-apiserver's `kubeOpenAPIResultToFieldErrors`
(pkg/apiserver/validation/validation.go) and rendered by apimachinery's
`field.Error.ErrorBody` (pkg/util/validation/field/errors.go).
"""

from __future__ import annotations

import copy
import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kubesim import formats, statuses, structural
from kubesim.schemacheck import validate_custom

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "required": ["size"],
            "properties": {
                "size": {"type": "integer", "minimum": 1, "maximum": 10},
                "mode": {"type": "string", "enum": ["Fast", "Safe"]},
                "name": {"type": "string", "pattern": "^[a-z]+$", "minLength": 2, "maxLength": 5},
                "when": {"type": "string", "format": "date-time"},
                "count": {"type": "integer", "format": "int32"},
                "port": {"x-kubernetes-int-or-string": True},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
                "ids": {"type": "array", "items": {"type": "integer"}, "minItems": 1},
                "maybe": {"type": "integer", "nullable": True},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "ports": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["port", "protocol"],
                    "items": {
                        "type": "object",
                        "required": ["port"],
                        "properties": {
                            "port": {"type": "integer"},
                            "protocol": {"type": "string", "default": "TCP"},
                        },
                    },
                },
                "template": {
                    "type": "object",
                    "x-kubernetes-embedded-resource": True,
                    "x-kubernetes-preserve-unknown-fields": True,
                },
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "either": {
                    "type": "string",
                    "anyOf": [{"pattern": "^a"}, {"pattern": "^b"}],
                },
            },
        },
    },
}


def cr(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 3, **spec},
    }


def test_a_valid_object_has_no_causes() -> None:
    assert validate_custom(SCHEMA, cr(mode="Fast", name="abc", port="http", tags=["x"])) == []


def test_wrong_type_is_type_invalid_naming_the_json_type_twice() -> None:
    assert validate_custom(SCHEMA, cr(size="big")) == [
        {
            "reason": "FieldValueTypeInvalid",
            "message": 'Invalid value: "string": spec.size in body must be of type integer: '
            '"string"',
            "field": "spec.size",
        }
    ]


def test_missing_required_property_is_required_value_on_its_path() -> None:
    obj = cr()
    del obj["spec"]["size"]
    assert validate_custom(SCHEMA, obj) == [
        {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.size"}
    ]


def test_enum_violation_lists_the_supported_values_in_schema_order() -> None:
    [cause] = validate_custom(SCHEMA, cr(mode="Sometimes"))
    assert cause == {
        "reason": "FieldValueNotSupported",
        "message": 'Unsupported value: "Sometimes": supported values: "Fast", "Safe"',
        "field": "spec.mode",
    }


def test_bounds_pattern_and_lengths_use_the_openapi_wording() -> None:
    causes = validate_custom(SCHEMA, cr(size=11, name="A"))
    assert [c["message"] for c in causes] == [
        "Invalid value: 11: spec.size in body should be less than or equal to 10",
        'Invalid value: "A": spec.name in body should be at least 2 chars long',
        "Invalid value: \"A\": spec.name in body should match '^[a-z]+$'",
    ]
    [long] = validate_custom(SCHEMA, cr(name="abcdef"))
    assert long == {
        "reason": "FieldValueTooLong",
        "message": "Too long: may not be more than 5 bytes",
        "field": "spec.name",
    }


def test_item_counts_use_too_many_and_should_have_at_least() -> None:
    causes = validate_custom(SCHEMA, cr(tags=["a", "b", "c"], ids=[]))
    assert causes == [
        {
            "reason": "FieldValueTooMany",
            "message": "Too many: 3: must have at most 2 items",
            "field": "spec.tags",
        },
        {
            "reason": "FieldValueInvalid",
            "message": "Invalid value: 0: spec.ids in body should have at least 1 items",
            "field": "spec.ids",
        },
    ]


def test_list_items_are_validated_on_indexed_paths() -> None:
    [cause] = validate_custom(SCHEMA, cr(tags=["a", 5]))
    assert cause["field"] == "spec.tags[1]"
    assert cause["message"] == (
        'Invalid value: "integer": spec.tags[1] in body must be of type string: "integer"'
    )


def test_map_values_are_validated_on_dotted_key_paths() -> None:
    [cause] = validate_custom(SCHEMA, cr(labels={"app": 1}))
    assert cause["field"] == "spec.labels.app"


def test_date_time_format_is_checked_and_int32_is_not_a_checked_format() -> None:
    assert validate_custom(SCHEMA, cr(when="2026-01-02T03:04:05.123456Z", count=2**40)) == []
    [cause] = validate_custom(SCHEMA, cr(when="yesterday"))
    assert cause == {
        "reason": "FieldValueTypeInvalid",
        "message": 'Invalid value: "yesterday": spec.when in body must be of type date-time: '
        '"yesterday"',
        "field": "spec.when",
    }


def test_int_or_string_accepts_both_and_names_both_types_otherwise() -> None:
    assert validate_custom(SCHEMA, cr(port=8080)) == validate_custom(SCHEMA, cr(port="x")) == []
    [cause] = validate_custom(SCHEMA, cr(port=True))
    assert cause["message"] == (
        'Invalid value: "boolean": spec.port in body must be of type integer,string: "boolean"'
    )


def test_null_in_a_nullable_field_passes_and_elsewhere_is_a_type_error() -> None:
    assert validate_custom(SCHEMA, cr(maybe=None)) == []
    [cause] = validate_custom(SCHEMA, cr(ids=[1, None]))
    assert cause["message"] == (
        'Invalid value: "null": spec.ids[1] in body must be of type integer: "null"'
    )


def test_preserve_unknown_fields_keeps_undeclared_data_unvalidated() -> None:
    assert validate_custom(SCHEMA, cr(free={"anything": {"nested": [1, "x", None]}})) == []


def test_embedded_resource_needs_api_version_and_kind_and_valid_metadata() -> None:
    causes = validate_custom(SCHEMA, cr(template={"metadata": {"labels": {"a b": "x"}}}))
    assert [(c["reason"], c["field"]) for c in causes] == [
        ("FieldValueRequired", "spec.template.apiVersion"),
        ("FieldValueRequired", "spec.template.kind"),
        ("FieldValueInvalid", "spec.template.metadata.labels"),
    ]
    ok = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {}}
    assert validate_custom(SCHEMA, cr(template=ok)) == []


def test_map_list_with_a_duplicate_key_is_a_duplicate_value() -> None:
    ports = [{"port": 80, "protocol": "TCP"}, {"port": 80, "protocol": "TCP"}]
    [cause] = validate_custom(SCHEMA, cr(ports=ports))
    assert cause == {
        "reason": "FieldValueDuplicate",
        "message": 'Duplicate value: {"port":80,"protocol":"TCP"}',
        "field": "spec.ports[1]",
    }


def test_any_of_failure_carries_no_path_as_the_real_server_reports_it() -> None:
    causes = validate_custom(SCHEMA, cr(either="zzz"))
    assert causes[0] == {
        "reason": "FieldValueInvalid",
        "message": 'Invalid value: "": "spec.either" must validate at least one schema (anyOf)',
        "field": "<nil>",
    }
    assert causes[1]["message"] == ("Invalid value: \"zzz\": spec.either in body should match '^a'")


def test_an_unchanged_invalid_field_ratchets_on_update_but_a_changed_one_fails() -> None:
    old = cr(size="legacy", mode="Fast")
    new = copy.deepcopy(old)
    new["spec"]["mode"] = "Safe"
    assert validate_custom(SCHEMA, new, old) == []
    assert [c["field"] for c in validate_custom(SCHEMA, new)] == ["spec.size"]
    new["spec"]["size"] = "bigger"
    assert [c["field"] for c in validate_custom(SCHEMA, new, old)] == ["spec.size"]


def test_map_list_items_correlate_by_key_for_ratcheting() -> None:
    old = cr(ports=[{"port": "x", "protocol": "TCP"}])
    new = cr(ports=[{"port": 81, "protocol": "UDP"}, {"port": "x", "protocol": "TCP"}])
    assert validate_custom(SCHEMA, new, old) == []


def test_non_nullable_nulls_are_dropped_while_nullable_and_defaulted_ones_stay() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "integer"},
            "b": {"type": "integer", "nullable": True},
            "c": {"type": "string", "default": "C"},
            "d": {"type": "array", "items": {"type": "integer"}},
        },
    }
    obj: dict[str, Any] = {"a": None, "b": None, "c": None, "d": [1, None]}
    structural.coerce(schema, obj)
    assert obj == {"b": None, "c": "C", "d": [1, None]}


def test_defaults_fill_existing_objects_only_and_nest() -> None:
    schema = {
        "type": "object",
        "properties": {
            "requeuing": {
                "type": "object",
                "properties": {
                    "timeInSeconds": {"type": "integer", "default": 300},
                    "growth": {
                        "type": "object",
                        "default": {},
                        "properties": {
                            "kind": {"type": "string", "default": "exponential"},
                        },
                    },
                },
            },
            "other": {"type": "object", "properties": {"x": {"type": "integer", "default": 1}}},
        },
    }
    obj: dict[str, Any] = {"requeuing": {"timeInSeconds": 5}}
    structural.coerce(schema, obj)
    assert obj == {"requeuing": {"timeInSeconds": 5, "growth": {"kind": "exponential"}}}


def test_metadata_is_never_coerced_by_the_schema() -> None:
    schema = {
        "type": "object",
        "properties": {
            "metadata": {
                "type": "object",
                "properties": {"name": {"type": "string", "default": "x"}},
            }
        },
    }
    obj: dict[str, Any] = {"metadata": {"labels": None}}
    structural.coerce(schema, obj)
    assert obj == {"metadata": {"labels": None}}


def test_supported_formats_are_checked_and_others_ignored() -> None:
    assert formats.supported("date-time") and formats.supported("uuid")
    assert not formats.supported("int32") and not formats.supported("made-up")
    assert formats.is_valid("date-time", "2026-01-02t03:04:05+01:00")
    assert not formats.is_valid("date-time", "2026-01-02")
    assert not formats.is_valid("date-time", "2026-02-30T00:00:00Z")
    assert formats.is_valid("uuid", "0f8fad5b-d9cb-469f-a165-70867728950e")
    assert not formats.is_valid("ipv4", "300.1.1.1") and formats.is_valid("ipv4", "10.0.0.1")
    assert formats.is_valid("cidr", "10.0.0.0/8") and not formats.is_valid("cidr", "10.0.0.0")
    assert formats.is_valid("duration", "1h30m") and formats.is_valid("duration", "3 days")
    assert not formats.is_valid("byte", "not base64!")


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_go_float_rendering_round_trips_every_finite_float(value: float) -> None:
    text = statuses.go_float(value)
    assert float(text) == value or (value == 0 and float(text) == 0)
    assert math.copysign(1, float(text)) == math.copysign(1, value) or value == 0

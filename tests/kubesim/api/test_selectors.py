"""Reference §2.3: label- and field-selector grammar (pure functions)."""

from __future__ import annotations

import pytest

from kubesim.resources import BUILTIN_TYPES
from kubesim.selectors import (
    SelectorError,
    build_matcher,
    labels_match,
    parse_bool,
    parse_field_selector,
    parse_label_selector,
)

PODS = next(rt for rt in BUILTIN_TYPES if rt.plural == "pods")
JOBS = next(rt for rt in BUILTIN_TYPES if rt.plural == "jobs")


def _obj(**labels: str) -> dict[str, object]:
    return {"metadata": {"name": "x", "labels": labels}}


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("a=b", {"a": "b"}, True),
        ("a==b", {"a": "b"}, True),
        ("a!=b", {}, True),
        ("a!=b", {"a": "b"}, False),
        ("a in (b, c)", {"a": "c"}, True),
        ("a notin (b,c)", {}, True),
        ("a notin (b,c)", {"a": "b"}, False),
        ("a", {"a": ""}, True),
        ("!a", {"a": "x"}, False),
        ("a>3", {"a": "4"}, True),
        ("a<3", {"a": "4"}, False),
        ("a=b, c=d", {"a": "b", "c": "d"}, True),
        ("a=b,c=d", {"a": "b"}, False),
        ("example.com/app=x", {"example.com/app": "x"}, True),
        ("a=", {"a": ""}, True),
    ],
)
def test_label_selector_grammar_matches_like_apimachinery(
    selector: str, labels: dict[str, str], expected: bool
) -> None:
    assert labels_match(parse_label_selector(selector), _obj(**labels)) is expected


@pytest.mark.parametrize(
    "selector", ["a in b", "a in (b", "=b", "a=b,", "a b", "a>x", "-a=b", "a=(b)"]
)
def test_malformed_label_selector_is_rejected(selector: str) -> None:
    with pytest.raises(SelectorError):
        parse_label_selector(selector)


def test_field_selector_supports_escapes_and_negation() -> None:
    reqs = parse_field_selector(r"metadata.name=a\,b,spec.nodeName!=n1", PODS)
    assert [(r.field, r.value, r.negate) for r in reqs] == [
        ("metadata.name", "a,b", False),
        ("spec.nodeName", "n1", True),
    ]


def test_unsupported_field_label_names_the_field() -> None:
    with pytest.raises(SelectorError, match=r"field label not supported: spec\.foo"):
        parse_field_selector("spec.foo=1", PODS)


def test_empty_node_name_selects_unscheduled_pods() -> None:
    match = build_matcher(PODS, "", "spec.nodeName=")
    assert match is not None
    assert match({"metadata": {"name": "p"}, "spec": {}})
    assert not match({"metadata": {"name": "p"}, "spec": {"nodeName": "n"}})


def test_job_status_successful_field_reads_succeeded_count() -> None:
    match = build_matcher(JOBS, "", "status.successful=2")
    assert match is not None
    assert match({"metadata": {"name": "j"}, "status": {"succeeded": 2}})


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", True),
        ("t", True),
        ("True", True),
        ("TRUE", True),
        ("0", False),
        ("False", False),
        ("f", False),
    ],
)
def test_booleans_parse_like_go_parsebool(text: str, value: bool) -> None:
    assert parse_bool(text) is value


def test_invalid_boolean_is_rejected() -> None:
    with pytest.raises(SelectorError):
        parse_bool("yes")

"""Subjects: the layout of DESIGN §3, the reversible token encoding, filters, streams."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from clearance import subjects
from clearance.subjects import (
    AlertSubject,
    CycleSubject,
    DlqSubject,
    KubeSubject,
    SubjectError,
    alert_filter,
    alert_subject,
    cycle_filter,
    cycle_subject,
    decode_token,
    dlq_subject,
    encode_token,
    kube_filter,
    kube_subject,
    parse_subject,
)

# Names chosen to break naive encodings: subject metacharacters, the escape character
# itself, things that look like escapes, the cluster-scope marker, whitespace of every
# kind, non-ASCII, and the empty string.
TRICKY_NAMES = [
    "",
    "_",
    "__",
    "_a",
    "a_",
    "~",
    "~~",
    "~2E",
    "~2e",
    "~7E",
    "a~b",
    ".",
    "..",
    "a.b",
    "my.job.v1",
    ".leading",
    "trailing.",
    "*",
    ">",
    "a*b",
    "a>b",
    "a b",
    " ",
    "\t",
    "\n",
    "a\r\nb",
    "\x00",
    "system:node:worker-1",
    "ns/name",
    "100%",
    "%2E",
    "ünïcödé",
    "名前",
    "emoji-🚀",
    "UPPER-lower-09",
    "x" * 253,
    "a." * 100,
]

PLAIN_NAMES = ["a", "bert-finetune", "worker-0", "node_3", "x" * 253, "ABC-123"]

_TOKEN = re.compile(r"^[A-Za-z0-9_~-]+$")


def matches(pattern: str, subject: str) -> bool:
    """NATS wildcard semantics: `*` is one token, a trailing `>` is one or more."""
    pattern_tokens, subject_tokens = pattern.split("."), subject.split(".")
    for index, token in enumerate(pattern_tokens):
        if token == ">":
            return len(subject_tokens) > index
        if index >= len(subject_tokens):
            return False
        if token not in ("*", subject_tokens[index]):
            return False
    return len(subject_tokens) == len(pattern_tokens)


@pytest.mark.parametrize("name", TRICKY_NAMES, ids=repr)
def test_token_encoding_round_trips_and_yields_one_safe_token(name: str) -> None:
    token = encode_token(name)
    assert _TOKEN.match(token), token
    assert token != subjects.CLUSTER_SCOPE_TOKEN
    assert decode_token(token) == name


def test_token_encoding_is_injective_over_tricky_names() -> None:
    tokens = [encode_token(name) for name in TRICKY_NAMES]
    assert len(set(tokens)) == len(TRICKY_NAMES)


@pytest.mark.parametrize("name", PLAIN_NAMES)
def test_dns_names_are_left_unchanged(name: str) -> None:
    assert encode_token(name) == name


def test_dots_are_escaped_as_hex() -> None:
    assert encode_token("my.job") == "my~2Ejob"
    assert encode_token("~") == "~7E"
    assert encode_token("") == "~"
    assert encode_token("_") == "~5F"


@pytest.mark.parametrize("token", ["~61", "~2e", "~Z1", "~2", "a.b", "a b", "*", ">", "_", ""])
def test_non_canonical_or_illegal_tokens_are_rejected(token: str) -> None:
    with pytest.raises(SubjectError):
        decode_token(token)


@pytest.mark.parametrize("name", TRICKY_NAMES, ids=repr)
def test_kube_subject_round_trips_any_name(name: str) -> None:
    subject = kube_subject("pod", "team-a", name)
    assert parse_subject(subject) == KubeSubject(kind="pod", namespace="team-a", name=name)


@pytest.mark.parametrize("namespace", [None, ""])
def test_cluster_scoped_objects_use_underscore_namespace(namespace: str | None) -> None:
    subject = kube_subject("node", namespace, "node-3")
    assert subject == "clearance.kube.v1.node._.node-3"
    assert parse_subject(subject) == KubeSubject(kind="node", namespace=None, name="node-3")


def test_namespace_literally_underscore_is_distinct_from_cluster_scope() -> None:
    subject = kube_subject("pod", "_", "p")
    assert subject == "clearance.kube.v1.pod.~5F.p"
    assert parse_subject(subject) == KubeSubject(kind="pod", namespace="_", name="p")


@pytest.mark.parametrize(
    "event", ["dispatched", "teardown.started", "deletion.confirmed", "finalizers.removed"]
)
@pytest.mark.parametrize("aw", ["bert", "my.aw", "_"])
def test_cycle_subject_keeps_dotted_event_names_whole(event: str, aw: str) -> None:
    subject = cycle_subject("team-a", aw, event)
    assert parse_subject(subject) == CycleSubject(namespace="team-a", appwrapper=aw, event=event)


def test_cycle_subject_layout_matches_design() -> None:
    assert (
        cycle_subject("team-a", "bert", "teardown.started")
        == "clearance.cycle.v1.team-a.bert.teardown.started"
    )


@pytest.mark.parametrize("severity", subjects.SEVERITIES)
def test_alert_subject_round_trips(severity: subjects.Severity) -> None:
    subject = alert_subject(severity, "ns.with.dots", "a w", "deletion.stuck")
    assert subject == f"clearance.alert.v1.{severity}.ns~2Ewith~2Edots.a~20w.deletion.stuck"
    assert parse_subject(subject) == AlertSubject(
        severity=severity, namespace="ns.with.dots", appwrapper="a w", alert="deletion.stuck"
    )


def test_dlq_subject_round_trips() -> None:
    assert dlq_subject("CLEARANCE_KUBE") == "clearance.dlq.v1.CLEARANCE_KUBE"
    assert parse_subject("clearance.dlq.v1.CLEARANCE_KUBE") == DlqSubject("CLEARANCE_KUBE")


@pytest.mark.parametrize(
    "subject",
    [
        "",
        "foo.bar",
        "clearance.kube.v2.pod.ns.name",
        "clearance.kube.v1.deployment.ns.name",
        "clearance.kube.v1.pod.ns",
        "clearance.kube.v1.pod.ns.a.b",
        "clearance.kube.v1.pod..name",
        "clearance.kube.v1.pod.ns.~zz",
        "clearance.cycle.v1.ns.aw",
        "clearance.cycle.v1._.aw.cleared",
        "clearance.cycle.v1.ns.aw.Cleared",
        "clearance.alert.v1.fatal.ns.aw.deletion.stuck",
        "clearance.alert.v1.warning.ns.aw",
        "clearance.dlq.v1",
        "clearance.dlq.v1.A.B",
        "clearance.metrics.v1.x.y",
    ],
)
def test_garbage_subjects_raise_subject_error_naming_the_subject(subject: str) -> None:
    with pytest.raises(SubjectError) as caught:
        parse_subject(subject)
    assert isinstance(caught.value, ValueError)
    assert repr(subject) in str(caught.value)


@pytest.mark.parametrize(
    ("build", "kwargs"),
    [
        (kube_subject, {"kind": "deployment", "namespace": "ns", "name": "n"}),
        (cycle_subject, {"namespace": "", "appwrapper": "aw", "event": "cleared"}),
        (cycle_subject, {"namespace": "ns", "appwrapper": "aw", "event": "a..b"}),
        (cycle_subject, {"namespace": "ns", "appwrapper": "aw", "event": "*"}),
        (alert_subject, {"severity": "fatal", "namespace": "ns", "appwrapper": "a", "alert": "x"}),
        (dlq_subject, {"stream": "A.B"}),
    ],
)
def test_builders_reject_values_outside_the_layout(build: object, kwargs: dict[str, str]) -> None:
    assert callable(build)
    with pytest.raises(SubjectError):
        build(**kwargs)


def test_alert_filter_for_one_namespace_matches_all_its_alerts_only() -> None:
    pattern = alert_filter(namespace="team-a")
    assert pattern == "clearance.alert.v1.*.team-a.*.>"
    assert matches(pattern, alert_subject("critical", "team-a", "aw", "requeue.limit"))
    assert matches(pattern, alert_subject("warning", "team-a", "x.y", "deletion.stuck"))
    assert not matches(pattern, alert_subject("warning", "team-b", "aw", "deletion.stuck"))


def test_cycle_filter_for_one_appwrapper_matches_every_event_of_it() -> None:
    pattern = cycle_filter(namespace="team-a", appwrapper="my.aw")
    assert pattern == "clearance.cycle.v1.team-a.my~2Eaw.>"
    assert matches(pattern, cycle_subject("team-a", "my.aw", "teardown.started"))
    assert matches(pattern, cycle_subject("team-a", "my.aw", "cleared"))
    assert not matches(pattern, cycle_subject("team-a", "my", "cleared"))


def test_cycle_filter_for_one_event_across_namespaces() -> None:
    pattern = cycle_filter(event="cleared")
    assert pattern == "clearance.cycle.v1.*.*.cleared"
    assert matches(pattern, cycle_subject("a", "b", "cleared"))
    assert not matches(pattern, cycle_subject("a", "b", "deletion.confirmed"))


def test_kube_filter_distinguishes_any_namespace_from_cluster_scope() -> None:
    assert kube_filter() == "clearance.kube.v1.*.*.*"
    assert kube_filter(kind="node", namespace="") == "clearance.kube.v1.node._.*"
    assert matches(kube_filter(kind="pod", namespace="ns"), kube_subject("pod", "ns", "a.b"))
    assert not matches(kube_filter(kind="pod", namespace=""), kube_subject("pod", "ns", "a"))


def test_severity_filter_selects_pager_worthy_alerts() -> None:
    pattern = alert_filter(severity="critical")
    assert matches(pattern, alert_subject("critical", "ns", "aw", "requeue.limit"))
    assert not matches(pattern, alert_subject("warning", "ns", "aw", "requeue.limit"))


def test_streams_have_design_names_retention_and_disjoint_subjects() -> None:
    assert {s.name: s.max_age for s in subjects.STREAMS} == {
        "CLEARANCE_KUBE": timedelta(hours=24),
        "CLEARANCE_CYCLE": timedelta(days=7),
        "CLEARANCE_ALERTS": timedelta(days=30),
        "CLEARANCE_DLQ": timedelta(days=30),
    }
    assert subjects.KUBE.max_age_seconds == 86400.0
    samples = [
        kube_subject("pod", "ns", "p"),
        cycle_subject("ns", "aw", "teardown.started"),
        alert_subject("info", "ns", "aw", "node.lost"),
        dlq_subject("CLEARANCE_CYCLE"),
    ]
    for subject in samples:
        owners = [s for s in subjects.STREAMS if any(matches(f, subject) for f in s.subjects)]
        assert owners == [subjects.stream_for_subject(subject)], subject

"""NATS subjects and JetStream streams of the Clearance event catalog (DESIGN §3).

Every subject Clearance publishes on is built here and nowhere else, so the layout
below is the single source of truth for the watcher, the tracker, the dispatcher,
the bus and the users' filters:

    stream            subjects                                                 max age
    CLEARANCE_KUBE    clearance.kube.v1.<kind>.<namespace>.<name>              24 h
    CLEARANCE_CYCLE   clearance.cycle.v1.<namespace>.<aw>.<event>              7 d
    CLEARANCE_ALERTS  clearance.alert.v1.<severity>.<namespace>.<aw>.<alert>   30 d
    CLEARANCE_DLQ     clearance.dlq.v1.<stream>                                30 d

`<event>` and `<alert>` may span several tokens (`teardown.started`,
`deletion.stuck`); every other position is exactly one token, so parsing reads the
fixed tokens from the left and takes the rest as the event name.

Token encoding
--------------
Kubernetes names are mostly DNS-1123 labels, but dots are legal in most names
(`my.job`) and would split a token, and a few kinds allow `:`. Names and
namespaces therefore pass through :func:`encode_token`, which is reversible:

* `A-Z a-z 0-9 - _` stand for themselves;
* every other character becomes `~XX` per UTF-8 byte, upper-case hex
  (`.` → `~2E`, `~` → `~7E`, space → `~20`, `*` → `~2A`);
* the empty string becomes a lone `~` (no escape is ever a lone `~`);
* a name that is exactly `_` becomes `~5F`, because a bare `_` token is the
  cluster-scope marker used in the namespace position.

In the namespace position, `None` and `""` (the Kubernetes spelling of "no
namespace") both mean cluster-scoped and encode to `_`; parsing returns `None`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Final, Literal, get_args

ROOT: Final = "clearance"
VERSION: Final = "v1"

CLUSTER_SCOPE_TOKEN: Final = "_"
"""Namespace token of cluster-scoped objects (nodes)."""

_ESCAPE: Final = "~"
_EMPTY_TOKEN: Final = "~"
_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
_ALL_SAFE: Final = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPE_RE: Final = re.compile(r"~([0-9A-F]{2})")
_EVENT_NAME_RE: Final = re.compile(r"^[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)*$")

KubeKind = Literal["appwrapper", "pod", "node", "item"]
Severity = Literal["info", "warning", "critical"]

KUBE_KINDS: Final[tuple[KubeKind, ...]] = get_args(KubeKind)
SEVERITIES: Final[tuple[Severity, ...]] = get_args(Severity)


class SubjectError(ValueError):
    """A subject or token that does not belong to the Clearance catalog."""


# --------------------------------------------------------------------------- tokens


def encode_token(value: str) -> str:
    """Encode a Kubernetes name or namespace as one NATS subject token (reversible)."""
    if value == "":
        return _EMPTY_TOKEN
    if value == CLUSTER_SCOPE_TOKEN:
        return "~5F"
    if _ALL_SAFE.fullmatch(value):  # the common case, without a loop over the characters
        return value
    out: list[str] = []
    for char in value:
        if char in _SAFE:
            out.append(char)
        else:
            out.extend(f"{_ESCAPE}{byte:02X}" for byte in char.encode("utf-8"))
    return "".join(out)


def decode_token(token: str) -> str:
    """Invert :func:`encode_token`; raises :class:`SubjectError` on a token it never makes."""
    if token == _EMPTY_TOKEN:
        return ""
    if token == CLUSTER_SCOPE_TOKEN:
        raise SubjectError("token '_' is the cluster-scope marker, not a name")
    raw = bytearray()
    index = 0
    while index < len(token):
        char = token[index]
        if char == _ESCAPE:
            match = _ESCAPE_RE.match(token, index)
            if match is None:
                raise SubjectError(f"bad escape at offset {index} in token {token!r}")
            raw.append(int(match.group(1), 16))
            index = match.end()
        elif char in _SAFE:
            raw.append(ord(char))
            index += 1
        else:
            raise SubjectError(f"character {char!r} is not allowed in token {token!r}")
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SubjectError(f"token {token!r} does not decode to UTF-8") from exc
    if encode_token(decoded) != token:
        # e.g. "~61" for "a": decodable, but not canonical; two spellings of one
        # name would defeat subject filters, so only the canonical one is accepted.
        raise SubjectError(f"token {token!r} is not in canonical form")
    return decoded


def encode_namespace(namespace: str | None) -> str:
    """Namespace token; `None` or `""` (cluster-scoped) becomes `_`."""
    if not namespace:
        return CLUSTER_SCOPE_TOKEN
    return encode_token(namespace)


def decode_namespace(token: str) -> str | None:
    """Invert :func:`encode_namespace`; `_` becomes `None`."""
    if token == CLUSTER_SCOPE_TOKEN:
        return None
    namespace = decode_token(token)
    if namespace == "":
        raise SubjectError("an empty namespace is spelled '_' (cluster-scoped)")
    return namespace


def _check_event_name(name: str, *, what: str) -> str:
    if not _EVENT_NAME_RE.match(name):
        raise SubjectError(f"{what} {name!r} must be dot-separated lower-case tokens")
    return name


def _check_appwrapper_namespace(namespace: str) -> None:
    if not namespace:
        raise SubjectError("AppWrappers are namespaced: the namespace must not be empty")


# -------------------------------------------------------------------- exact subjects


def kube_subject(kind: KubeKind, namespace: str | None, name: str) -> str:
    """`clearance.kube.v1.<kind>.<namespace>.<name>`."""
    if kind not in KUBE_KINDS:
        raise SubjectError(f"unknown kube kind {kind!r}; expected one of {KUBE_KINDS}")
    return f"{ROOT}.kube.{VERSION}.{kind}.{encode_namespace(namespace)}.{encode_token(name)}"


def cycle_subject(namespace: str, appwrapper: str, event: str) -> str:
    """`clearance.cycle.v1.<namespace>.<aw>.<event>`; `event` may contain dots."""
    _check_event_name(event, what="cycle event")
    _check_appwrapper_namespace(namespace)
    ns, aw = encode_namespace(namespace), encode_token(appwrapper)
    return f"{ROOT}.cycle.{VERSION}.{ns}.{aw}.{event}"


def alert_subject(severity: Severity, namespace: str, appwrapper: str, alert: str) -> str:
    """`clearance.alert.v1.<severity>.<namespace>.<aw>.<alert>`."""
    if severity not in SEVERITIES:
        raise SubjectError(f"unknown severity {severity!r}; expected one of {SEVERITIES}")
    _check_event_name(alert, what="alert")
    _check_appwrapper_namespace(namespace)
    ns, aw = encode_namespace(namespace), encode_token(appwrapper)
    return f"{ROOT}.alert.{VERSION}.{severity}.{ns}.{aw}.{alert}"


def dlq_subject(stream: str) -> str:
    """`clearance.dlq.v1.<stream>`: where undecodable messages of `stream` are copied."""
    if not stream or any(char not in _SAFE for char in stream):
        raise SubjectError(f"stream name {stream!r} is not a plain subject token")
    return f"{ROOT}.dlq.{VERSION}.{stream}"


# ------------------------------------------------------------------- parsed subjects


@dataclass(frozen=True, slots=True)
class KubeSubject:
    kind: KubeKind
    namespace: str | None
    name: str


@dataclass(frozen=True, slots=True)
class CycleSubject:
    namespace: str
    appwrapper: str
    event: str


@dataclass(frozen=True, slots=True)
class AlertSubject:
    severity: Severity
    namespace: str
    appwrapper: str
    alert: str


@dataclass(frozen=True, slots=True)
class DlqSubject:
    stream: str


ParsedSubject = KubeSubject | CycleSubject | AlertSubject | DlqSubject


def _require_namespace(token: str) -> str:
    namespace = decode_namespace(token)
    if namespace is None:
        raise SubjectError("AppWrappers are namespaced, '_' is not allowed")
    return namespace


def _parse(area: str, rest: list[str]) -> ParsedSubject:
    """Parse the tokens after `clearance.<area>.v1`; errors carry only the reason."""
    if area == "kube":
        if len(rest) != 3:
            raise SubjectError("expected <kind>.<namespace>.<name>")
        kind = rest[0]
        if kind not in KUBE_KINDS:
            raise SubjectError(f"unknown kube kind {kind!r}")
        return KubeSubject(
            kind=kind, namespace=decode_namespace(rest[1]), name=decode_token(rest[2])
        )
    if area == "cycle":
        if len(rest) < 3:
            raise SubjectError("expected <namespace>.<aw>.<event>")
        return CycleSubject(
            namespace=_require_namespace(rest[0]),
            appwrapper=decode_token(rest[1]),
            event=_check_event_name(".".join(rest[2:]), what="cycle event"),
        )
    if area == "alert":
        if len(rest) < 4:
            raise SubjectError("expected <severity>.<namespace>.<aw>.<alert>")
        severity = rest[0]
        if severity not in SEVERITIES:
            raise SubjectError(f"unknown severity {severity!r}")
        return AlertSubject(
            severity=severity,
            namespace=_require_namespace(rest[1]),
            appwrapper=decode_token(rest[2]),
            alert=_check_event_name(".".join(rest[3:]), what="alert"),
        )
    if area == "dlq":
        if len(rest) != 1:
            raise SubjectError("expected <stream>")
        return DlqSubject(stream=rest[0])
    raise SubjectError(f"unknown area {area!r}")


def parse_subject(subject: str) -> ParsedSubject:
    """Parse any Clearance subject; raises :class:`SubjectError` naming subject and reason."""
    tokens = subject.split(".")
    try:
        if len(tokens) < 4 or tokens[0] != ROOT or tokens[2] != VERSION:
            raise SubjectError(f"not a {ROOT}.<area>.{VERSION} subject")
        if any(token == "" for token in tokens):
            raise SubjectError("empty token")
        return _parse(tokens[1], tokens[3:])
    except SubjectError as exc:
        raise SubjectError(f"{subject!r}: {exc}") from None


# --------------------------------------------------------------------------- filters


def _filter_token(value: str | None, *, namespace: bool = False) -> str:
    if value is None:
        return "*"
    return encode_namespace(value) if namespace else encode_token(value)


def kube_filter(
    *, kind: KubeKind | None = None, namespace: str | None = None, name: str | None = None
) -> str:
    """Filter on kube events; `None` is a wildcard, `namespace=""` means cluster-scoped."""
    if kind is not None and kind not in KUBE_KINDS:
        raise SubjectError(f"unknown kube kind {kind!r}")
    tokens = [kind or "*", _filter_token(namespace, namespace=True), _filter_token(name)]
    return f"{ROOT}.kube.{VERSION}." + ".".join(tokens)


def cycle_filter(
    *, namespace: str | None = None, appwrapper: str | None = None, event: str | None = None
) -> str:
    """Filter on cycle events; `None` is a wildcard (`>` for the event)."""
    last = ">" if event is None else _check_event_name(event, what="cycle event")
    tokens = [_filter_token(namespace, namespace=True), _filter_token(appwrapper), last]
    return f"{ROOT}.cycle.{VERSION}." + ".".join(tokens)


def alert_filter(
    *,
    severity: Severity | None = None,
    namespace: str | None = None,
    appwrapper: str | None = None,
    alert: str | None = None,
) -> str:
    """Filter on alerts, e.g. `alert_filter(namespace="team-a")` for one namespace."""
    if severity is not None and severity not in SEVERITIES:
        raise SubjectError(f"unknown severity {severity!r}")
    last = ">" if alert is None else _check_event_name(alert, what="alert")
    tokens = [
        severity or "*",
        _filter_token(namespace, namespace=True),
        _filter_token(appwrapper),
        last,
    ]
    return f"{ROOT}.alert.{VERSION}." + ".".join(tokens)


# --------------------------------------------------------------------------- streams

KUBE_STREAM: Final = "CLEARANCE_KUBE"
CYCLE_STREAM: Final = "CLEARANCE_CYCLE"
ALERT_STREAM: Final = "CLEARANCE_ALERTS"
DLQ_STREAM: Final = "CLEARANCE_DLQ"

KUBE_MAX_AGE: Final = timedelta(hours=24)
CYCLE_MAX_AGE: Final = timedelta(days=7)
ALERT_MAX_AGE: Final = timedelta(days=30)
DLQ_MAX_AGE: Final = timedelta(days=30)


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """What the bus provisions for one stream (retention is `limits` for all)."""

    name: str
    subjects: tuple[str, ...]
    max_age: timedelta
    description: str

    @property
    def max_age_seconds(self) -> float:
        """`max_age` in seconds, the unit nats-py's `StreamConfig` takes."""
        return self.max_age.total_seconds()


KUBE: Final = StreamSpec(
    name=KUBE_STREAM,
    subjects=(f"{ROOT}.kube.{VERSION}.>",),
    max_age=KUBE_MAX_AGE,
    description="Slim Kubernetes object snapshots published by the watcher.",
)
CYCLE: Final = StreamSpec(
    name=CYCLE_STREAM,
    subjects=(f"{ROOT}.cycle.{VERSION}.>",),
    max_age=CYCLE_MAX_AGE,
    description="Requeue-cycle facts published by the dispatcher and the tracker.",
)
ALERTS: Final = StreamSpec(
    name=ALERT_STREAM,
    subjects=(f"{ROOT}.alert.{VERSION}.>",),
    max_age=ALERT_MAX_AGE,
    description="Alerts for people and pagers: stuck deletions, lost nodes, limits.",
)
DLQ: Final = StreamSpec(
    name=DLQ_STREAM,
    subjects=(f"{ROOT}.dlq.{VERSION}.>",),
    max_age=DLQ_MAX_AGE,
    description="Copies of messages a consumer could not decode, one subject per stream.",
)

STREAMS: Final[tuple[StreamSpec, ...]] = (KUBE, CYCLE, ALERTS, DLQ)
STREAMS_BY_NAME: Final[dict[str, StreamSpec]] = {spec.name: spec for spec in STREAMS}


def stream_for_subject(subject: str) -> StreamSpec:
    """The stream that captures `subject` (by its area token)."""
    parsed = parse_subject(subject)
    if isinstance(parsed, KubeSubject):
        return KUBE
    if isinstance(parsed, CycleSubject):
        return CYCLE
    if isinstance(parsed, AlertSubject):
        return ALERTS
    return DLQ

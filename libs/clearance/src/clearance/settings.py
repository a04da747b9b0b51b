"""The settings pattern shared by every Clearance service.

Each service has one frozen dataclass of settings, built once at start-up from
``CLEARANCE_*`` environment variables and passed down explicitly (no globals). Every
field is declared with :func:`setting`, which carries the help text, so ``--help``
(:func:`render_help`) and the parser can never drift from the code. Bad values fail
with one :class:`SettingsError` that names every offending variable; the service
entry points (:mod:`clearance.entrypoint`) print it and exit non-zero instead of showing a
traceback.

Supported field types: ``str``, ``int``, ``float``, ``bool``, :data:`Seconds`
(durations such as ``500ms``, ``2s``, ``5m``, ``1h``, ``1d``, ``1m30s`` or a bare number
of seconds), ``pathlib.Path``, ``Literal[...]`` choices, ``tuple[str, ...]``
(comma-separated) and any of those ``| None`` (an empty variable means ``None``).
"""

from __future__ import annotations

import dataclasses
import math
import os
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import field
from pathlib import Path
from typing import Annotated, Any, ClassVar, Final, Literal, TypeVar, Union

from clearance.bounds import Range, counts, durations
from clearance.durations import format_duration, parse_duration

__all__ = [
    "ENV_PREFIX",
    "CommonSettings",
    "Seconds",
    "Settings",
    "SettingsError",
    "doc",
    "format_duration",
    "parse_bool",
    "parse_duration",
    "render_help",
]

ENV_PREFIX: Final = "CLEARANCE_"


class _DurationMarker:
    """Annotation marker: this float is a duration in seconds, parsed from ``5m`` etc."""

    def __repr__(self) -> str:
        return "duration"


Seconds = Annotated[float, _DurationMarker()]
"""A duration in seconds; the environment accepts ``500ms``, ``2s``, ``5m``, ``1h``, ``1d``."""

_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off"})


class SettingsError(ValueError):
    """One or more settings are invalid; ``problems`` holds one line per variable."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid configuration:\n  " + "\n  ".join(problems))


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(f"expected true/false (or 1/0, yes/no, on/off), got {text!r}")


def doc(
    help: str,
    *,
    env: str | None = None,
    secret: bool = False,
    check: Callable[[Any], str | None] | None = None,
    bounds: Range | None = None,
) -> dict[str, Any]:
    """Field metadata documenting a setting: ``field(default=..., metadata=doc("..."))``.

    ``env`` overrides the derived ``CLEARANCE_<FIELD>`` name; ``secret`` hides the value
    in errors and ``--help`` (pair it with ``repr=False``); ``check`` returns an error
    text for a parsed value that is out of range (or ``None`` when fine); ``bounds`` is the
    documented range of a number or duration (:mod:`clearance.bounds`), shown by ``--help``
    and enforced like ``check``.
    """
    return {"help": help, "env": env, "secret": secret, "check": check, "bounds": bounds}


S = TypeVar("S", bound="Settings")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    """Base of every settings class: ``from_env`` and ``render_help`` come from here."""

    env_prefix: ClassVar[str] = ENV_PREFIX

    @classmethod
    def env_name(cls, field_name: str) -> str:
        for f in dataclasses.fields(cls):
            if f.name == field_name:
                return _env_var(cls, f)
        raise KeyError(field_name)

    @classmethod
    def from_env(cls: type[S], environ: Mapping[str, str] | None = None) -> S:
        """Build the settings from ``environ`` (default ``os.environ``); unset → default."""
        env = os.environ if environ is None else environ
        hints = typing.get_type_hints(cls, include_extras=True)
        values: dict[str, Any] = {}
        problems: list[str] = []
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            var = _env_var(cls, f)
            if var not in env:
                continue
            try:
                value = _parse(hints[f.name], env[var])
                error = _run_check(f, value)
            except ValueError as exc:
                error = str(exc)
            if error is not None:
                shown = "<hidden>" if f.metadata.get("secret") else repr(env[var])
                problems.append(f"{var}={shown}: {error}")
                continue
            values[f.name] = value
        if problems:
            raise SettingsError(problems)
        return cls(**values)

    @classmethod
    def render_help(cls) -> str:
        return render_help(cls)


def render_help(cls: type[Settings], *, title: str | None = None) -> str:
    """The ``--help`` text: every setting with its variable, type, default and doc."""
    hints = typing.get_type_hints(cls, include_extras=True)
    lines = [title or f"{cls.__name__}: configuration from environment variables", ""]
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        var = _env_var(cls, f)
        kind = _describe_type(hints[f.name])
        if f.metadata.get("secret") and f.default not in (None, dataclasses.MISSING):
            default = "(secret)"
        else:
            default = _describe_default(hints[f.name], f.default)
        bounds = f.metadata.get("bounds")
        shown = f", range: {bounds}" if bounds is not None else ""
        lines.append(f"  {var}  [{kind}, default: {default}{shown}]")
        doc = str(f.metadata.get("help") or "(undocumented)")
        for para in doc.splitlines():
            lines.append(f"      {para}")
    return "\n".join(lines) + "\n"


# -- parsing by type -------------------------------------------------------------------


def _env_var(cls: type[Settings], f: dataclasses.Field[Any]) -> str:
    explicit = f.metadata.get("env")
    return str(explicit) if explicit else f"{cls.env_prefix}{f.name.upper()}"


def _run_check(f: dataclasses.Field[Any], value: Any) -> str | None:
    if value is None:
        return None
    bounds: Range | None = f.metadata.get("bounds")
    if bounds is not None and (problem := bounds.problem(value)) is not None:
        return problem
    check = f.metadata.get("check")
    if check is None:
        return None
    result: str | None = check(value)
    return result


def _split_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0], True
    return tp, False


def _parse(tp: Any, raw: str) -> Any:
    inner, optional = _split_optional(tp)
    if optional and raw.strip() == "":
        return None
    origin = typing.get_origin(inner)
    if origin is Annotated:
        base, *extras = typing.get_args(inner)
        if any(isinstance(e, _DurationMarker) for e in extras):
            return parse_duration(raw)
        return _parse(base, raw)
    if origin is Literal:
        choices = typing.get_args(inner)
        for choice in choices:
            if str(choice).lower() == raw.strip().lower():
                return choice
        raise ValueError(f"expected one of {', '.join(map(str, choices))}, got {raw!r}")
    if origin is tuple:
        args = typing.get_args(inner)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_parse(args[0], item.strip()) for item in raw.split(",") if item.strip())
    if inner is bool:
        return parse_bool(raw)
    if inner is int:
        try:
            return int(raw.strip())
        except ValueError:
            raise ValueError(f"expected an integer, got {raw!r}") from None
    if inner is float:
        try:
            value = float(raw.strip())
        except ValueError:
            raise ValueError(f"expected a number, got {raw!r}") from None
        if not math.isfinite(value):
            raise ValueError(f"expected a finite number, got {raw!r}")
        return value
    if inner is str:
        return raw
    if inner is Path:
        if not raw.strip():
            raise ValueError("expected a path, got an empty value")
        return Path(raw.strip())
    raise TypeError(f"unsupported settings field type {tp!r}")


def _describe_type(tp: Any) -> str:
    inner, optional = _split_optional(tp)
    origin = typing.get_origin(inner)
    if origin is Annotated:
        base, *extras = typing.get_args(inner)
        text = (
            "duration"
            if any(isinstance(e, _DurationMarker) for e in extras)
            else (_describe_type(base))
        )
    elif origin is Literal:
        text = "|".join(map(str, typing.get_args(inner)))
    elif origin is tuple:
        text = f"comma-separated {_describe_type(typing.get_args(inner)[0])}s"
    elif inner is Path:
        text = "path"
    elif isinstance(inner, type):
        text = {bool: "bool", int: "int", float: "number", str: "string"}.get(inner, inner.__name__)
    else:
        text = str(inner)
    return f"{text}, optional" if optional else text


def _describe_default(tp: Any, default: Any) -> str:
    if default is dataclasses.MISSING:
        return "(required)"
    if default is None:
        return "unset"
    inner, _ = _split_optional(tp)
    if typing.get_origin(inner) is Annotated and any(
        isinstance(e, _DurationMarker) for e in typing.get_args(inner)[1:]
    ):
        return format_duration(float(default))
    if isinstance(default, tuple):
        return ",".join(map(str, default)) if default else "(empty)"
    if isinstance(default, bool):
        return "true" if default else "false"
    if default == "":
        return '""'
    return str(default)


# -- checks ----------------------------------------------------------------------------


LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class CommonSettings(Settings):
    """Settings every Clearance service shares (DESIGN §9); services subclass this."""

    nats_url: str = field(
        default="nats://127.0.0.1:4222",
        metadata=doc("NATS server URL(s), comma-separated for a cluster (nats:// or tls://)."),
    )
    nats_creds: Path | None = field(
        default=None,
        metadata=doc(
            "NATS credentials file (.creds: user JWT + nkey seed) for decentralised auth."
        ),
    )
    nats_nkey_seed: Path | None = field(
        default=None,
        metadata=doc("File holding an nkey seed (SU...) to authenticate with an nkey user."),
    )
    nats_user: str | None = field(
        default=None, metadata=doc("NATS user name for user/password auth.")
    )
    nats_password: str | None = field(
        default=None, repr=False, metadata=doc("NATS password for user/password auth.", secret=True)
    )
    nats_tls_ca: Path | None = field(
        default=None,
        metadata=doc("PEM CA bundle to verify the NATS server certificate (enables TLS)."),
    )
    nats_tls_cert: Path | None = field(
        default=None,
        metadata=doc("PEM client certificate for mutual TLS (needs CLEARANCE_NATS_TLS_KEY)."),
    )
    nats_tls_key: Path | None = field(
        default=None, metadata=doc("PEM private key of the client certificate.")
    )
    nats_connect_timeout: Seconds = field(
        default=2.0,
        metadata=doc("Timeout of one connection attempt to NATS.", bounds=durations(0.05, 300.0)),
    )
    nats_reconnect_wait: Seconds = field(
        default=2.0,
        metadata=doc(
            "Pause between reconnection attempts; the client reconnects forever.",
            bounds=durations(0.01, 300.0),
        ),
    )
    stream_replicas: int = field(
        default=1,
        metadata=doc(
            "JetStream replicas for Clearance's streams and KV buckets: 1 on a single "
            "server, 3 on a production cluster.",
            check=lambda n: None if n in (1, 3, 5) else "must be 1, 3 or 5",
        ),
    )
    publish_retry_deadline: Seconds = field(
        default=30.0,
        metadata=doc(
            "How long one publish keeps retrying (same Msg-Id, so never a duplicate) until "
            "JetStream acknowledges it: covers a NATS node loss, whose stream leader election "
            "takes a few seconds; past it the publish fails and the caller decides.",
            bounds=durations(1.0, 600.0),
        ),
    )
    http_host: str = field(
        default="0.0.0.0",
        metadata=doc("Address the health/metrics HTTP server binds (127.0.0.1 off-cluster)."),
    )
    http_port: int = field(
        default=8080,
        metadata=doc(
            "Port of /healthz, /readyz and /metrics (0 = pick a free port).",
            bounds=counts(0, 65535),
        ),
    )
    namespaces: tuple[str, ...] = field(
        default=(),
        metadata=doc(
            "Kubernetes namespaces to serve, comma-separated; empty means all namespaces."
        ),
    )
    appwrapper_group: str = field(
        default="workload.codeflare.dev",
        metadata=doc("API group of the AppWrapper CRD (legacy MCAD clusters: mcad.ibm.com)."),
    )
    appwrapper_version: str = field(
        default="v1beta1", metadata=doc("API version of the AppWrapper CRD.")
    )
    log_level: LogLevel = field(default="INFO", metadata=doc("Minimum log level."))
    log_format: Literal["json", "text"] = field(
        default="json",
        metadata=doc("json: one JSON object per line (for collectors); text: for humans."),
    )
    event_loop: Literal["uvloop", "asyncio"] = field(
        default="uvloop",
        metadata=doc(
            "The asyncio event loop the service runs on. uvloop (libuv, the default) cuts the "
            "per-message cost of every hop on the requeue path: in the clearance benchmark the "
            "removal → redispatch p99 fell by about a third (docs/benchmarks.md). asyncio: the "
            "standard library's loop, for a platform without uvloop or to rule it out."
        ),
    )
    kube_qps: float = field(
        default=50.0,
        metadata=doc(
            "Client-side limit on Kubernetes API requests per second of this process (default "
            "50, Kueue's manager default; client-go's own is 5; 0 = no limit). A rack loss "
            "makes every service burst at once: the limit keeps each one a polite client of "
            "the API server (clearance.apimanners).",
            bounds=Range(0.0, 10_000.0),
        ),
    )
    kube_burst: int = field(
        default=100,
        metadata=doc(
            "Requests the rate limit lets through at once after an idle spell (default 100, "
            "Kueue's manager default): a teardown's LIST + DELETEs go out without waiting.",
            bounds=counts(1, 100_000),
        ),
    )
    kube_max_retries: int = field(
        default=10,
        metadata=doc(
            "Retries of one API request answered 429 (or 5xx with Retry-After), after the "
            "Retry-After it names, and of a read answered 5xx, after a jittered backoff "
            "(default 10, client-go's maxRetries; 0 = hand every error to the caller).",
            bounds=counts(0, 100),
        ),
    )
    shutdown_timeout: Seconds = field(
        default=10.0,
        metadata=doc(
            "Longest wait for in-flight handlers on SIGTERM before giving up on them.",
            bounds=durations(0.01, 300.0),
        ),
    )
    shutdown_grace: Seconds = field(
        default=5.0,
        metadata=doc(
            "Hard bound from SIGTERM to exit, whatever NATS and the API do; work left then is "
            "abandoned (effects are idempotent: a restart or the next leader redoes it).",
            bounds=durations(0.1, 5.0),
        ),
    )

    def __post_init__(self) -> None:
        problems = []
        if (self.nats_tls_cert is None) != (self.nats_tls_key is None):
            problems.append(
                f"{self.env_name('nats_tls_cert')} and {self.env_name('nats_tls_key')} "
                "must be set together"
            )
        if (self.nats_user is None) != (self.nats_password is None):
            problems.append(
                f"{self.env_name('nats_user')} and {self.env_name('nats_password')} "
                "must be set together"
            )
        if problems:
            raise SettingsError(problems)

    @property
    def nats_servers(self) -> list[str]:
        return [url.strip() for url in self.nats_url.split(",") if url.strip()]


OTEL_HELP: Final = """\
OpenTelemetry (standard variables, not prefixed):
  OTEL_EXPORTER_OTLP_ENDPOINT  OTLP http/protobuf collector, e.g. http://jaeger:4318
                               (unset: traces are not exported)
  OTEL_SERVICE_NAME            overrides the service name in traces
  OTEL_RESOURCE_ATTRIBUTES     extra resource attributes, key=value,key=value
"""

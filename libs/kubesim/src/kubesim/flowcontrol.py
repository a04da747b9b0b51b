"""API request limits: `429 Too Many Requests` with `Retry-After`, as a loaded API server answers.

Two independent limits, both off by default (pure decisions, no I/O; the HTTP layer asks
:meth:`FlowControl.admit` before handling a request and releases the slot afterwards):

* **In flight** (kube-apiserver `--max-requests-inflight`, real default 400, and
  `--max-mutating-requests-inflight`, real default 200; apiserver filters/maxinflight.go):
  at most N read-only (get/list) and M mutating requests are executing at once, server-wide.
  Watches are long-running and never counted, as `longRunningRequestCheck` exempts them.
* **Rate**: a token bucket of `rate_limit` requests/s with `rate_burst` tokens, either one
  bucket for the whole server (`scope="global"`) or one per User-Agent (`scope="user-agent"`;
  the services' agents carry their pid, so that is one bucket per process, the way API
  Priority and Fairness gives each flow its own queue). Watch requests take a token when they
  start (APF admits a watch like any request, then stops counting it). There is no rate
  limit in a real kube-apiserver; this stands in for APF's seat limits as something a
  benchmark can set and read.

Exempt from both: kubesim's own controllers (User-Agent `kubesim…`; they play the control
plane, which APF puts in its own priority levels) and the health probes `/healthz`,
`/livez`, `/readyz` (APF's `probes` flow schema is exempt).

A rejection is answered the way the real filters answer (maxinflight.go `tooManyRequests`,
also used by APF): HTTP 429, `Retry-After: <s>`, and a **plain-text** body
`Too many requests, please try again later.` — not a Status object; client-go turns it into
a Status with reason TooManyRequests and `retryAfterSeconds` from the header, and
kubernetes-asyncio raises `ApiException(status=429)` with the header. The in-flight limit
says `Retry-After: 1` (the real constant); the rate limit says when the next token is due
(at least 1 s).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

__all__ = [
    "REJECTION_BODY",
    "FlowControl",
    "FlowControlConfig",
    "FlowControlError",
    "Rejection",
    "Slot",
]

Scope = Literal["global", "user-agent"]
REJECTION_BODY = "Too many requests, please try again later.\n"
_READ_ONLY_VERBS = frozenset({"get", "list", "watch"})
_EXEMPT_PATHS = frozenset({"/healthz", "/livez", "/readyz"})
EXEMPT_USER_AGENT_PREFIX = "kubesim"


def resource_of(path: str) -> str:
    """``/api/v1/namespaces/ns/pods/p`` → ``pods``; ``…/appwrappers/a/status`` →
    ``appwrappers/status`` (what a request is about, for the per-request counters)."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    if parts[:1] == ["api"]:
        parts = parts[2:]
    elif parts[:1] == ["apis"]:
        parts = parts[3:]
    else:
        return path
    if parts[:1] == ["namespaces"] and len(parts) >= 3:
        parts = parts[2:]
    if not parts:
        return "(discovery)"
    return parts[0] + (f"/{parts[2]}" if len(parts) >= 3 else "")


class FlowControlError(ValueError):
    """A setting out of range (answered 400 by the admin API, exit 2 by the CLI)."""


@dataclass(frozen=True, slots=True)
class FlowControlConfig:
    """Limits; 0 switches a limit off. All fields are also runtime-settable."""

    max_requests_inflight: int = 0
    """Read-only (get, list) requests executing at once; 0 = no limit (real default 400)."""
    max_mutating_requests_inflight: int = 0
    """Mutating requests executing at once; 0 = no limit (real default 200)."""
    rate_limit: float = 0.0
    """Token refill rate in requests/s; 0 = no rate limit."""
    rate_burst: int = 0
    """Bucket size; 0 = ceil(rate_limit) (at least 1)."""
    rate_scope: Scope = "global"
    """One bucket for the server, or one per User-Agent."""
    retry_after: int = 1
    """Retry-After seconds for in-flight rejections (real: the constant 1)."""

    def checked(self) -> FlowControlConfig:
        if self.max_requests_inflight < 0 or self.max_mutating_requests_inflight < 0:
            raise FlowControlError("in-flight limits must be >= 0 (0 = no limit)")
        if self.rate_limit < 0 or not math.isfinite(self.rate_limit):
            raise FlowControlError("rate limit must be a finite number >= 0 (0 = no limit)")
        if self.rate_burst < 0:
            raise FlowControlError("rate burst must be >= 0 (0 = ceil(rate))")
        if self.rate_scope not in ("global", "user-agent"):
            raise FlowControlError("rate scope must be 'global' or 'user-agent'")
        if not 1 <= self.retry_after <= 3600:
            raise FlowControlError("retry-after must be between 1 and 3600 seconds")
        return self

    @property
    def burst(self) -> int:
        return self.rate_burst or max(1, math.ceil(self.rate_limit))

    def to_json(self) -> dict[str, Any]:
        return {
            "maxRequestsInflight": self.max_requests_inflight,
            "maxMutatingRequestsInflight": self.max_mutating_requests_inflight,
            "rateLimit": self.rate_limit,
            "rateBurst": self.rate_burst,
            "rateScope": self.rate_scope,
            "retryAfter": self.retry_after,
        }


_JSON_FIELDS = {
    "maxRequestsInflight": ("max_requests_inflight", int),
    "maxMutatingRequestsInflight": ("max_mutating_requests_inflight", int),
    "rateLimit": ("rate_limit", float),
    "rateBurst": ("rate_burst", int),
    "rateScope": ("rate_scope", str),
    "retryAfter": ("retry_after", int),
}


def config_from_json(base: FlowControlConfig, body: dict[str, Any]) -> FlowControlConfig:
    """Apply the given JSON fields to `base`; unknown fields and bad types are errors."""
    changes: dict[str, Any] = {}
    for key, value in body.items():
        if key == "resetCounters":
            continue
        if key not in _JSON_FIELDS:
            raise FlowControlError(f"unknown field {key!r} (known: {', '.join(_JSON_FIELDS)})")
        attr, kind = _JSON_FIELDS[key]
        if kind is str:
            if not isinstance(value, str):
                raise FlowControlError(f"{key} must be a string")
            changes[attr] = value
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise FlowControlError(f"{key} must be a number")
        if kind is int and not float(value).is_integer():
            raise FlowControlError(f"{key} must be a whole number")
        changes[attr] = kind(value)
    return replace(base, **changes).checked()


@dataclass(frozen=True, slots=True)
class Rejection:
    reason: Literal["inflight", "mutating-inflight", "rate"]
    retry_after: int


@dataclass(slots=True)
class Slot:
    """An admitted request; :meth:`release` when its response is done (idempotent)."""

    _owner: FlowControl | None
    _mutating: bool
    _counted: bool

    def release(self) -> None:
        owner, self._owner = self._owner, None
        if owner is not None and self._counted:
            owner._release(mutating=self._mutating)


@dataclass(slots=True)
class _Bucket:
    tokens: float
    stamp: float


@dataclass(slots=True)
class _Counters:
    admitted: int = 0
    admitted_by_agent: Counter[str] = field(default_factory=Counter)
    admitted_by_request: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(User-Agent, "<verb> <resource>[/<subresource>]") → admitted requests."""
    rejected: Counter[str] = field(default_factory=Counter)
    rejected_by_agent: Counter[str] = field(default_factory=Counter)
    peak_read_only: int = 0
    peak_mutating: int = 0


class FlowControl:
    """The limits of one API server; every method is synchronous (called on the loop)."""

    def __init__(
        self,
        config: FlowControlConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = (config or FlowControlConfig()).checked()
        self._clock = clock
        self._read_only = 0
        self._mutating = 0
        self._buckets: dict[str, _Bucket] = {}
        self._counters = _Counters()

    def configure(self, config: FlowControlConfig) -> None:
        """Replace the limits; buckets start full again, requests in flight stay counted."""
        self.config = config.checked()
        self._buckets.clear()

    def reset_counters(self) -> None:
        self._counters = _Counters()

    def admit(self, *, path: str, verb: str, user_agent: str) -> Slot | Rejection:
        cfg = self.config
        if path in _EXEMPT_PATHS or user_agent.startswith(EXEMPT_USER_AGENT_PREFIX):
            return Slot(None, False, False)
        watch = verb == "watch"
        mutating = verb not in _READ_ONLY_VERBS
        if not watch:
            if mutating and 0 < cfg.max_mutating_requests_inflight <= self._mutating:
                return self._reject("mutating-inflight", cfg.retry_after, user_agent)
            if not mutating and 0 < cfg.max_requests_inflight <= self._read_only:
                return self._reject("inflight", cfg.retry_after, user_agent)
        if cfg.rate_limit > 0:
            wait = self._take_token(user_agent if cfg.rate_scope == "user-agent" else "")
            if wait > 0:
                return self._reject("rate", max(1, math.ceil(wait)), user_agent)
        self._counters.admitted += 1
        self._counters.admitted_by_agent[user_agent] += 1
        self._counters.admitted_by_request[(user_agent, f"{verb} {resource_of(path)}")] += 1
        if watch:
            return Slot(self, False, False)
        if mutating:
            self._mutating += 1
            self._counters.peak_mutating = max(self._counters.peak_mutating, self._mutating)
        else:
            self._read_only += 1
            self._counters.peak_read_only = max(self._counters.peak_read_only, self._read_only)
        return Slot(self, mutating, True)

    def _take_token(self, key: str) -> float:
        """0 if a token was taken, else the seconds until one is due."""
        cfg = self.config
        now = self._clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(tokens=float(cfg.burst), stamp=now)
        bucket.tokens = min(float(cfg.burst), bucket.tokens + (now - bucket.stamp) * cfg.rate_limit)
        bucket.stamp = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0.0
        return (1.0 - bucket.tokens) / cfg.rate_limit

    def _reject(self, reason: str, retry_after: int, user_agent: str) -> Rejection:
        self._counters.rejected[reason] += 1
        self._counters.rejected_by_agent[user_agent] += 1
        return Rejection(reason, retry_after)  # type: ignore[arg-type]

    def _release(self, *, mutating: bool) -> None:
        if mutating:
            self._mutating = max(0, self._mutating - 1)
        else:
            self._read_only = max(0, self._read_only - 1)

    def state(self) -> dict[str, Any]:
        """Settings, current and peak in-flight counts, admitted and rejected requests."""
        c = self._counters
        return {
            **self.config.to_json(),
            "inflight": {"readOnly": self._read_only, "mutating": self._mutating},
            "peakInflight": {"readOnly": c.peak_read_only, "mutating": c.peak_mutating},
            "admitted": c.admitted,
            "admittedByUserAgent": dict(c.admitted_by_agent),
            "admittedByRequest": [
                {"userAgent": agent, "request": what, "count": n}
                for (agent, what), n in sorted(c.admitted_by_request.items())
            ],
            "rejected": {
                "total": sum(c.rejected.values()),
                "byReason": dict(c.rejected),
                "byUserAgent": dict(c.rejected_by_agent),
            },
        }

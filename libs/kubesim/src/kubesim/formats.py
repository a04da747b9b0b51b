"""String formats a CRD schema may name (`format: date-time`, `uuid`, `ipv4`, ...).

The API server validates a string against its schema's `format` only for the formats
apiextensions-apiserver supports (pkg/apiserver/validation/formats.go,
`supportedVersionedFormats`, names compared with `-` removed, so `date-time` = `datetime`);
any other format (`int32`, `int64`, `float`, `double`, made-up names) is stripped from the
schema and never checked. The checks follow kube-openapi's strfmt registry
(pkg/validation/strfmt/default.go, time.go, duration.go): a failed check is reported as
`<path> in body must be of type <format>: "<value>"`.

`isbn`, `isbn10`, `isbn13` and `creditcard` are accepted without a check (kubesim does not
port govalidator's checksums); every other supported format is checked.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
import urllib.parse
from collections.abc import Callable
from datetime import date

__all__ = ["is_valid", "supported"]

_HEX24 = re.compile(r"^[0-9a-fA-F]{24}$")
_HOSTNAME = re.compile(
    r"^([a-zA-Z0-9]((-?[a-zA-Z0-9]{0,62})?)|([a-zA-Z0-9](([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)(\.)){1,}"
    r"([a-zA-Z0-9])(-?[a-zA-Z0-9]){1,62})$"
)
_UUID = {
    "uuid": re.compile(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$"),
    "uuid3": re.compile(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$"),
    "uuid4": re.compile(
        r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$"
    ),
    "uuid5": re.compile(
        r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$"
    ),
}
# strfmt.DateTimePattern, matched against the part after the date's "t".
_TIME_OF_DAY = re.compile(
    r"^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$"
)
_MAC = re.compile(
    r"^([0-9A-Fa-f]{2}([:-])){5}[0-9A-Fa-f]{2}$"
    r"|^([0-9A-Fa-f]{2}([:-])){7}[0-9A-Fa-f]{2}$"
    r"|^([0-9A-Fa-f]{2}([:-])){19}[0-9A-Fa-f]{2}$"
    r"|^([0-9A-Fa-f]{4}\.){2}[0-9A-Fa-f]{4}$"
    r"|^([0-9A-Fa-f]{4}\.){3}[0-9A-Fa-f]{4}$"
    r"|^([0-9A-Fa-f]{4}\.){9}[0-9A-Fa-f]{4}$"
)
_EMAIL = re.compile(r"^[^@\s<>\"(),:;\[\]\\]+@[^@\s<>\"(),:;\[\]\\]+$")
_SSN = re.compile(r"^\d{3}[- ]?\d{2}[- ]?\d{4}$")
_HEXCOLOR = re.compile(r"^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$")
_OCTET = r"\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*"
_RGBCOLOR = re.compile(rf"^rgb\({_OCTET},{_OCTET},{_OCTET}\)$")
_GO_DURATION = re.compile(r"^[-+]?((\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))+$")
_UNIT_DURATION = re.compile(r"^(\d+)\s*([A-Za-zµ]+)$")
_DURATION_WORDS = (
    "ns nano nanos nanosecond nanoseconds us µs micro micros microsecond microseconds ms "
    "milli millis millisecond milliseconds s sec secs second seconds m min mins minute minutes "
    "h hr hrs hour hours d day days w wk wks week weeks"
)
_DURATION_UNITS = frozenset(_DURATION_WORDS.split(" "))


def _date(text: str) -> bool:
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        return False
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _datetime(text: str) -> bool:
    """strfmt.IsDateTime: RFC 3339 date, `T` (any case), hh:mm:ss[.frac], `Z` or ±hh:mm."""
    if len(text) < 4:
        return False
    parts = text.lower().split("t")
    if len(parts) < 2 or not _date(parts[0]):
        return False
    match = _TIME_OF_DAY.match(parts[1])
    if match is None:
        return False
    return match.group(1) <= "23" and match.group(2) <= "59" and match.group(3) <= "59"


def _ip(text: str, version: int) -> bool:
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return False
    if version == 4:
        return "." in text and (addr.version == 4 or "::ffff:" in text.lower())
    return ":" in text


def _cidr(text: str) -> bool:
    if "/" not in text:
        return False
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return True


def _uri(text: str) -> bool:
    """Go's url.ParseRequestURI: an absolute URI or an absolute path."""
    if not text or text.startswith(" ") or any(c in text for c in " \t\n"):
        return False
    if text.startswith("/"):
        return True
    parsed = urllib.parse.urlsplit(text)
    return re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", parsed.scheme or "-") is not None


def _base64(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _duration(text: str) -> bool:
    if text == "0" or _GO_DURATION.match(text):
        return True
    match = _UNIT_DURATION.match(text)
    return match is not None and match.group(2) in _DURATION_UNITS


def _hostname(text: str) -> bool:
    if not _HOSTNAME.match(text) or len(text) > 255:
        return False
    return all(len(part) <= 63 for part in text.split("."))


def _accept(_text: str) -> bool:
    return True


def _matcher(rx: re.Pattern[str]) -> Callable[[str], bool]:
    def check(text: str) -> bool:
        return rx.match(text) is not None

    return check


_CHECKS: dict[str, Callable[[str], bool]] = {
    "bsonobjectid": lambda t: _HEX24.match(t) is not None,
    "uri": _uri,
    "email": lambda t: _EMAIL.match(t) is not None,
    "hostname": _hostname,
    "ipv4": lambda t: _ip(t, 4),
    "ipv6": lambda t: _ip(t, 6),
    "cidr": _cidr,
    "mac": lambda t: _MAC.match(t) is not None,
    **{name: _matcher(rx) for name, rx in _UUID.items()},
    "isbn": _accept,
    "isbn10": _accept,
    "isbn13": _accept,
    "creditcard": _accept,
    "ssn": lambda t: _SSN.match(t) is not None,
    "hexcolor": lambda t: _HEXCOLOR.match(t) is not None,
    "rgbcolor": lambda t: _RGBCOLOR.match(t) is not None,
    "byte": _base64,
    "password": _accept,
    "date": _date,
    "duration": _duration,
    "datetime": _datetime,
}


def supported(fmt: str) -> bool:
    """Whether the API server checks this format (others are stripped from the schema)."""
    return fmt.replace("-", "") in _CHECKS


def is_valid(fmt: str, text: str) -> bool:
    """Whether `text` satisfies the (supported) format; unsupported formats always pass."""
    check = _CHECKS.get(fmt.replace("-", ""))
    return True if check is None else check(text)

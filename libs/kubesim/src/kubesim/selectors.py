"""Label and field selectors: parsing (with apimachinery's grammar) and matching.

Pure functions over plain dicts. Parse errors raise :class:`SelectorError`; the HTTP layer
turns them into `400 BadRequest`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubesim.resources import ResourceType


class SelectorError(ValueError):
    """A selector that does not parse or names an unsupported field."""


_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _check_key(key: str) -> None:
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        raise SelectorError(f"unable to parse requirement: invalid label key {key!r}")
    if not name or len(name) > 63 or not _NAME_PART.match(name):
        raise SelectorError(
            f'unable to parse requirement: invalid label key "{key}": name part must consist of '
            "alphanumeric characters, '-', '_' or '.', and must start and end with an "
            "alphanumeric character"
        )


def _check_value(value: str) -> None:
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        raise SelectorError(
            f'unable to parse requirement: invalid label value: "{value}": a valid label must be '
            "an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
            "start and end with an alphanumeric character"
        )


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    op: str  # = != in notin exists !exists gt lt
    values: tuple[str, ...]

    def matches(self, labels: dict[str, str]) -> bool:
        has = self.key in labels
        value = labels.get(self.key)
        if self.op in ("=", "in"):
            return has and value in self.values
        if self.op in ("!=", "notin"):
            return not has or value not in self.values
        if self.op == "exists":
            return has
        if self.op == "!exists":
            return not has
        if not has or value is None:
            return False
        try:
            actual = int(value)
        except ValueError:
            return False
        bound = int(self.values[0])
        return actual > bound if self.op == "gt" else actual < bound


_TOKEN = re.compile(r"\s*(==|!=|=|\(|\)|,|!|>|<|[^\s=!(),<>]+)")


def _tokenize(text: str) -> list[str]:
    tokens: list[str] = []
    pos = 0
    while pos < len(text):
        if text[pos].isspace():
            pos += 1
            continue
        m = _TOKEN.match(text, pos)
        if not m:  # pragma: no cover - the pattern accepts any non-space char
            raise SelectorError(f"unable to parse requirement: unexpected {text[pos:]!r}")
        tokens.append(m.group(1))
        pos = m.end()
    return tokens


_OPERATORS = {"=", "==", "!=", "(", ")", ",", "!", ">", "<"}


def parse_label_selector(text: str) -> list[Requirement]:
    """Parse `a=b,c in (d,e),!f,g`; empty text selects everything."""
    tokens = _tokenize(text)
    reqs: list[Requirement] = []
    i = 0

    def peek(offset: int = 0) -> str | None:
        j = i + offset
        return tokens[j] if j < len(tokens) else None

    while i < len(tokens):
        tok = tokens[i]
        if tok == "!":
            key = peek(1)
            if key is None or key in _OPERATORS:
                raise SelectorError(
                    f"unable to parse requirement: found '{key or ''}', expected: identifier"
                )
            _check_key(key)
            reqs.append(Requirement(key, "!exists", ()))
            i += 2
        elif tok in _OPERATORS:
            raise SelectorError(
                f"unable to parse requirement: found '{tok}', expected: !, identifier"
            )
        else:
            key = tok
            _check_key(key)
            op = peek(1)
            if op is None or op == ",":
                reqs.append(Requirement(key, "exists", ()))
                i += 1
            elif op in ("=", "==", "!="):
                value = peek(2)
                if value is None or value == ",":
                    value_str = ""
                    i += 2
                elif value in _OPERATORS:
                    raise SelectorError(
                        f"unable to parse requirement: found '{value}', expected: identifier"
                    )
                else:
                    value_str = value
                    i += 3
                _check_value(value_str)
                reqs.append(Requirement(key, "!=" if op == "!=" else "=", (value_str,)))
            elif op in (">", "<"):
                value = peek(2)
                if value is None or value in _OPERATORS:
                    raise SelectorError(
                        "unable to parse requirement: found '', expected: identifier"
                    )
                try:
                    int(value)
                except ValueError as exc:
                    raise SelectorError(
                        "unable to parse requirement: for 'Gt', 'Lt' operators, the value "
                        f"must be an integer: {value}"
                    ) from exc
                reqs.append(Requirement(key, "gt" if op == ">" else "lt", (value,)))
                i += 3
            elif op in ("in", "notin"):
                if peek(2) != "(":
                    raise SelectorError(
                        f"unable to parse requirement: found '{peek(2) or ''}', expected: '('"
                    )
                j = i + 3
                values: list[str] = []
                expect_value = True
                while True:
                    t = tokens[j] if j < len(tokens) else None
                    if t is None:
                        raise SelectorError("unable to parse requirement: found '', expected: ')'")
                    if t == ")":
                        if expect_value and values:
                            values.append("")
                        break
                    if t == ",":
                        if expect_value:
                            values.append("")
                        expect_value = True
                    elif t in _OPERATORS:
                        raise SelectorError(
                            f"unable to parse requirement: found '{t}', expected: ',', ')' or "
                            "identifier"
                        )
                    else:
                        if not expect_value:
                            raise SelectorError(
                                f"unable to parse requirement: found '{t}', expected: ',' or ')'"
                            )
                        values.append(t)
                        expect_value = False
                    j += 1
                if not values:
                    raise SelectorError(
                        "unable to parse requirement: for 'in', 'notin' operators, values set "
                        "can't be empty"
                    )
                for v in values:
                    _check_value(v)
                reqs.append(Requirement(key, op, tuple(values)))
                i = j + 1
            else:
                raise SelectorError(
                    f"unable to parse requirement: found '{op}', expected: "
                    "'=', '!=', '==', 'in', notin'"
                )
        nxt = peek()
        if nxt is None:
            break
        if nxt != ",":
            raise SelectorError(f"unable to parse requirement: found '{nxt}', expected: ','")
        i += 1
        if i >= len(tokens):
            raise SelectorError("unable to parse requirement: found '', expected: identifier")
    return reqs


def labels_match(reqs: list[Requirement], obj: dict[str, Any]) -> bool:
    if not reqs:
        return True
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(r.matches(labels) for r in reqs)


# ---- field selectors -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FieldRequirement:
    field: str
    value: str
    negate: bool


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            cur.append(text[i : i + 2])
            i += 2
            continue
        if ch == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
        i += 1
    parts.append("".join(cur))
    return parts


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            if i + 1 >= len(text) or text[i + 1] not in "\\,=":
                raise SelectorError(f"invalid field selector: invalid escape sequence in {text!r}")
            out.append(text[i + 1])
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _find_operator(term: str) -> tuple[int, str]:
    i = 0
    while i < len(term):
        ch = term[i]
        if ch == "\\":
            i += 2
            continue
        if term.startswith("!=", i):
            return i, "!="
        if term.startswith("==", i):
            return i, "=="
        if ch == "=":
            return i, "="
        i += 1
    return -1, ""


def parse_field_selector(text: str, rt: ResourceType) -> list[FieldRequirement]:
    reqs: list[FieldRequirement] = []
    if not text.strip():
        return reqs
    for term in _split_unescaped(text, ","):
        if not term:
            continue
        idx, op = _find_operator(term)
        if idx < 0:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{term}'")
        field = _unescape(term[:idx].strip())
        value = _unescape(term[idx + len(op) :])
        if field not in rt.field_labels:
            raise SelectorError(f"field label not supported: {field}")
        reqs.append(FieldRequirement(field, value, op == "!="))
    return reqs


def _dig(obj: dict[str, Any], path: str) -> Any:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def _field_value(obj: dict[str, Any], field: str, rt: ResourceType) -> str:
    if rt.plural == "jobs" and field == "status.successful":
        return str(((obj.get("status") or {}).get("succeeded")) or 0)
    if rt.plural == "events" and field == "source":
        return str(((obj.get("source") or {}).get("component")) or "")
    if rt.plural == "pods" and field == "status.podIPs":
        ips = (obj.get("status") or {}).get("podIPs") or []
        return str(ips[0].get("ip", "")) if ips else ""
    value = _dig(obj, field)
    if value is None:
        if field in ("spec.unschedulable", "spec.hostNetwork"):
            return "false"
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def fields_match(reqs: list[FieldRequirement], obj: dict[str, Any], rt: ResourceType) -> bool:
    for r in reqs:
        actual = _field_value(obj, r.field, rt)
        if (actual == r.value) == r.negate:
            return False
    return True


def build_matcher(
    rt: ResourceType, label_selector: str, field_selector: str
) -> Callable[[dict[str, Any]], bool] | None:
    """A predicate for both selectors, or None when everything matches."""
    labels = parse_label_selector(label_selector) if label_selector else []
    fields = parse_field_selector(field_selector, rt) if field_selector else []
    if not labels and not fields:
        return None

    def match(obj: dict[str, Any]) -> bool:
        return labels_match(labels, obj) and fields_match(fields, obj, rt)

    return match


def parse_bool(text: str | None) -> bool | None:
    """Go's strconv.ParseBool: 1 t T TRUE true True / 0 f F FALSE false False."""
    if text is None:
        return None
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False", ""):
        return False
    raise SelectorError(f'strconv.ParseBool: parsing "{text}": invalid syntax')

"""Kubernetes quantities: suffixes, exponents, garbage refused, canonical units rounded up."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from clearance_dispatcher.capacity import QuantityError, canonical, parse_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Decimal("0.5")),
        ("2", Decimal(2)),
        ("1.5Gi", Decimal(1.5 * 2**30)),
        ("64Mi", Decimal(64 * 2**20)),
        ("1k", Decimal(1000)),
        ("2e3", Decimal(2000)),
        ("1E-3", Decimal("0.001")),
        ("100u", Decimal("0.0001")),
        (".5", Decimal("0.5")),
        (3, Decimal(3)),
        (0.25, Decimal("0.25")),
    ],
)
def test_parse_quantity_follows_kubernetes_suffixes(text: Any, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["lots", "1Gb", "", "1.2.3", "Mi", "--1", "1 Gi", True])
def test_parse_quantity_rejects_garbage(text: Any) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_canonical_units_round_up() -> None:
    assert canonical("cpu", "250m") == 250
    assert canonical("cpu", "1.0001") == 1001
    assert canonical("memory", "1Ki") == 1024
    with pytest.raises(QuantityError):
        canonical("cpu", "-1")


@pytest.mark.parametrize("text", ["1e1000000", "1e400", "1e18", "9223372036854775807Ki"])
def test_a_quantity_beyond_int64_is_refused_never_raised_or_queued_forever(text: str) -> None:
    """Found by the issue-13 fuzz: ``1e1000000`` raised decimal.Overflow out of validation, and
    ``1e400`` cores passed it and waited in the queue forever (no cluster is that large)."""
    with pytest.raises(QuantityError, match="too large"):
        canonical("cpu", text)


def test_the_largest_int64_quantity_and_a_vanishing_exponent_are_accepted() -> None:
    assert canonical("cpu", "9223372036854775807m") == 2**63 - 1
    assert canonical("cpu", "1e-1000000") == 1
    assert canonical("cpu", "0e99999") == 0

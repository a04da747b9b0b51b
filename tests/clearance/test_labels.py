"""Labels derived from AppWrapper names stay valid for any legal name (issue 13, DESIGN §5)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from clearance import labels

# RFC 1123 subdomain: what the API accepts as an AppWrapper name (≤ 253 characters).
_LABEL = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True)
SUBDOMAINS = st.lists(_LABEL, min_size=1, max_size=6).map(".".join).filter(lambda n: len(n) <= 253)
VALID_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def test_short_names_are_their_own_label_value() -> None:
    assert labels.value_for("seed-job") == "seed-job"
    assert labels.stamp(appwrapper="seed-job", namespace="default", attempt=2) == {
        "appwrapper.mcad.ibm.com": "seed-job",
        "workload.codeflare.dev/appwrapper": "seed-job",
        "clearance.dev/namespace": "default",
        "clearance.dev/attempt": "2",
    }


def test_a_253_character_name_becomes_a_valid_hashed_value() -> None:
    name = "a" * 240 + ".b" * 6 + "c"
    value = labels.value_for(name)
    assert len(value) <= 63 and VALID_VALUE.match(value)
    assert value.startswith("a" * 20) and value != labels.value_for(name[:-1] + "d")


def test_selector_uses_the_same_derivation_as_the_stamp() -> None:
    name = "x" * 100
    stamped = labels.stamp(appwrapper=name, namespace="ns", attempt=1)
    assert labels.selector_for(name, namespace="ns") == (
        f"appwrapper.mcad.ibm.com={stamped['appwrapper.mcad.ibm.com']},"
        f"clearance.dev/namespace={stamped['clearance.dev/namespace']}"
    )


@given(SUBDOMAINS)
def test_every_legal_name_maps_to_a_valid_label_value(name: str) -> None:
    value = labels.value_for(name)
    assert len(value) <= 63
    assert VALID_VALUE.match(value), value
    assert labels.value_for(name) == value


@given(SUBDOMAINS, SUBDOMAINS)
def test_distinct_long_names_get_distinct_values(a: str, b: str) -> None:
    if a != b:
        assert labels.value_for(a) != labels.value_for(b)

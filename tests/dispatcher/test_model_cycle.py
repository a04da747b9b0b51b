"""Model-level schedules of the dispatcher: its requeue cycle against a world that misbehaves.

The state machine (:mod:`model_cycle_machine`) drives the dispatcher's pure modules —
transitions, the typed bookkeeping and status, the requeue rules, the cache — the way the
service drives them (:mod:`model_dispatcher`), through thousands of schedules: attempts
that run or fail (also later), a truthful tracker's `cleared` delivered once, twice, stale or
for another AppWrapper, cache events late, lost and replayed, restarts between any two steps
of a reconcile (everything reloaded from the status), time that jumps past waits and pauses.
The invariants (S1, attempts, L2, records, L1) are listed in that module.

The proofs at the bottom run the same machine with one decision deliberately broken and
assert that the machine finds it.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

import pytest
from hypothesis import Phase
from hypothesis.stateful import run_state_machine_as_test
from tests.dispatcher.model_cycle_machine import CycleMachine
from tests.dispatcher.model_dispatcher import Decisions
from tests.support.modelcheck import model_settings, model_timeout

from clearance_dispatcher import requeueing, transitions
from clearance_dispatcher.status import Observed, Patch

MODEL_EXAMPLES = 2000
"""Schedules per `make test` (at the default profile; ``nightly`` runs ten times as many)."""
MODEL_STEPS = 50

pytestmark = pytest.mark.timeout(model_timeout(120))
"""The machine takes ~25 s here at the default profile; a profile with more examples waits
proportionally longer."""

TestDispatcherModel = CycleMachine.TestCase
TestDispatcherModel.settings = model_settings(examples=MODEL_EXAMPLES, steps=MODEL_STEPS)


def _finds(decisions: Decisions, invariant: str) -> None:
    """The machine, run with ``decisions``, fails with the violation ``invariant`` (a regex)."""

    class Broken(CycleMachine):
        pass

    Broken.decisions = decisions
    proof = model_settings(
        examples=600, steps=MODEL_STEPS, scaled=False, phases=[Phase.generate], database=None
    )
    with pytest.raises(AssertionError, match=rf"^{invariant}"):
        run_state_machine_as_test(Broken, settings=proof)


def _accepts_any_cleared(
    obs: Observed, *, attempt: int, cleared_at: datetime, now: datetime
) -> Patch | None:
    """Takes the `cleared` of any attempt as the awaited one (no attempt check)."""
    awaited = obs.clearance.tearing_down
    if awaited is None:
        return None
    return transitions.accept_cleared(obs, attempt=awaited, cleared_at=cleared_at, now=now)


def test_model_catches_a_dispatcher_that_accepts_a_cleared_of_another_attempt() -> None:
    _finds(
        Decisions(accept_cleared=_accepts_any_cleared),
        r"(S1: (cleared of|attempt) \d+|attempts: wrong clearedAt)",
    )


def _requeues_on_every_look(**kw: Any) -> requeueing.Decision:
    """Ignores the wait: an attempt is judged as soon as it is looked at."""
    return requeueing.decide(**(kw | {"wait_seconds": 0}))


def test_model_catches_a_requeue_decided_before_the_wait() -> None:
    _finds(Decisions(decide=_requeues_on_every_look), "L2: (before the wait|wait not grown)")


def _ignores_the_requeue_limit(**kw: Any) -> requeueing.Decision:
    """Never fails an AppWrapper at ``maxNumRequeuings``: it requeues for ever."""
    unlimited = dataclasses.replace(kw["requeuing"], max_num_requeuings=0)
    return requeueing.decide(**(kw | {"requeuing": unlimited}))


def test_model_catches_requeues_beyond_max_num_requeuings() -> None:
    _finds(Decisions(decide=_ignores_the_requeue_limit), "L2: more requeues than the limit")

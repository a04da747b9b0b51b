"""Settings of the model-level state machines (issue 14): examples scaled by the profile.

The Hypothesis profiles are registered in tests/conftest.py (``default`` for `make test`,
``ci`` derandomized when ``CI`` is set, ``nightly`` with ten times the examples, chosen by
``HYPOTHESIS_PROFILE``). A machine states its budget in examples at the default profile's
100; the active profile's ``max_examples`` scales it, so ``nightly`` runs every machine ten
times longer with the same code. Machines never have a deadline (a step's time depends on
the state, and the machines share two cores with everything else).
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings

BASE_EXAMPLES = 100
"""The default profile's ``max_examples``: the unit machine budgets are scaled against."""


def model_settings(*, examples: int, steps: int, scaled: bool = True, **overrides: Any) -> settings:
    """``examples`` schedules of at most ``steps`` steps (scaled by the profile unless not)."""
    profile = settings.default
    if scaled and profile is not None:
        examples = max(1, examples * profile.max_examples // BASE_EXAMPLES)
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        **overrides,
    )

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


def scale() -> float:
    """The active profile's ``max_examples`` over the default profile's."""
    profile = settings.default
    return 1.0 if profile is None else profile.max_examples / BASE_EXAMPLES


def model_timeout(seconds: float) -> float:
    """A pytest-timeout for a machine that needs ``seconds`` at the default profile."""
    return seconds * max(1.0, scale())


def model_settings(*, examples: int, steps: int, scaled: bool = True, **overrides: Any) -> settings:
    """``examples`` schedules of at most ``steps`` steps (scaled by the profile unless not)."""
    if scaled:
        examples = max(1, round(examples * scale()))
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        **overrides,
    )

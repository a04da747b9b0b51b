"""Which delivered messages get a CONSUMER span, for a consumer that keeps only some.

Building a span per message is a visible share of a busy consumer's CPU (each attribute is
validated on its way in). A consumer may keep a fraction of them: the choice follows the
producer's trace id, as OpenTelemetry's ``TraceIdRatioBased`` sampler does, so a trace keeps
every consumer span of that consumer or none; a message without trace context draws at
random. A message without a span is handled with the producer's span as the current one, so
spans its handler starts still join the producer's trace.
"""

from __future__ import annotations

import random
from contextlib import AbstractContextManager
from typing import Final

from opentelemetry import trace
from opentelemetry.context import Context

_LOW_64: Final = (1 << 64) - 1


def keeps(parent: Context, ratio: float) -> bool:
    """Does the message whose producer context is `parent` get a span at `ratio` (0..1)?"""
    if ratio >= 1.0:
        return True
    if ratio <= 0.0:
        return False
    producer = trace.get_current_span(parent).get_span_context()
    if producer.is_valid:
        return (producer.trace_id & _LOW_64) < round(ratio * (_LOW_64 + 1))
    return random.random() < ratio


def without_span(parent: Context) -> AbstractContextManager[trace.Span]:
    """Handle the message under the producer's span (or none): nothing is recorded."""
    return trace.use_span(trace.get_current_span(parent), end_on_exit=False)

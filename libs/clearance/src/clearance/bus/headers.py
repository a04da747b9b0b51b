"""The header names the bus reads and writes (nats-py header keys are case-sensitive)."""

from __future__ import annotations

from typing import Final

MSG_ID: Final = "Nats-Msg-Id"
"""The dedup header; the server only honours this exact spelling."""

DLQ_ERROR_HEADER: Final = "Clearance-Dlq-Error"
DLQ_SUBJECT_HEADER: Final = "Clearance-Dlq-Subject"
DLQ_STREAM_HEADER: Final = "Clearance-Dlq-Stream"
DLQ_SEQUENCE_HEADER: Final = "Clearance-Dlq-Sequence"
DLQ_CONSUMER_HEADER: Final = "Clearance-Dlq-Consumer"
DLQ_MSG_ID_HEADER: Final = "Clearance-Dlq-Msg-Id"

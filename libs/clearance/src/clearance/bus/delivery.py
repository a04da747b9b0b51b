"""What a consumer hands its handler: the event, and :class:`Delivery` about its message."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from nats.aio.msg import Msg

from clearance.bus.headers import MSG_ID

T = TypeVar("T")


@dataclass(frozen=True)
class Delivery:
    """What a handler knows about the message it is handling, besides the event."""

    msg: Msg
    subject: str
    headers: Mapping[str, str]
    stream: str
    consumer: str
    stream_sequence: int
    num_delivered: int

    @property
    def msg_id(self) -> str | None:
        return self.headers.get(MSG_ID)

    @property
    def redelivered(self) -> bool:
        return self.num_delivered > 1


Handler = Callable[[T, Delivery], Awaitable[None]]
Decoder = Callable[[bytes], T]

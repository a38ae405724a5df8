"""What the declare-time rules read of a queue or exchange that exists already: the ports
through which `arguments.check_queue_equivalence` and `check_exchange_equivalence` compare
a redeclare with it, so that the policy package needs no queue or exchange class.

`DeclaredQueue` is implemented by `lavin.broker.queues.queue.Queue`, `DeclaredExchange` by
`lavin.broker.routing.exchange.Exchange`.
"""

from __future__ import annotations

from typing import Any, Protocol


class DeclaredQueue(Protocol):
    """A queue as declared: its name, flags and arguments."""

    @property
    def name(self) -> str: ...

    @property
    def durable(self) -> bool: ...

    @property
    def exclusive_owner(self) -> object | None:
        """The connection of an exclusive queue."""

    @property
    def auto_delete(self) -> bool: ...

    @property
    def arguments(self) -> dict[str, Any]: ...


class DeclaredExchange(Protocol):
    """An exchange as declared: its name, type, flags and arguments."""

    @property
    def name(self) -> str: ...

    @property
    def type_name(self) -> str: ...

    @property
    def durable(self) -> bool: ...

    @property
    def auto_delete(self) -> bool: ...

    @property
    def internal(self) -> bool: ...

    @property
    def arguments(self) -> dict[str, Any]: ...

"""The quorum queue, with RabbitMQ 3.10's semantics on a single node.

Applications written for RabbitMQ 3.10 declare `x-queue-type: quorum` for queues that must
not lose messages. On one node a quorum queue is a durable FIFO queue with a few rules of
its own, split between this type and the core:

- Durable only (`durable_only`): the core refuses a non-durable, exclusive or auto-delete
  declaration with RabbitMQ's texts, as it does for streams.
- The core refuses `x-max-priority` and `x-queue-mode` ("invalid arg 'x-max-priority' for
  queue 'q' in vhost '/'", as RabbitMQ 3.10 does), counts the deliveries of every quorum
  queue (the `x-delivery-count` header, also without `x-delivery-limit`) and treats
  `x-overflow: reject-publish-dlx` as `drop-head`, as 3.10 does (`lavin.broker.policy.arguments`;
  the refusals are the `refused_by` of the rows in `lavin.broker.policy.queue_arguments`).
- Accepted and checked here, with RabbitMQ's texts: `x-dead-letter-strategy`
  (`at-most-once`, `at-least-once`), `x-quorum-initial-group-size` (a positive integer),
  `x-max-in-memory-length` and `x-max-in-memory-bytes` (non-negative integers). The group
  size and the in-memory limits have nothing to act on with one node and a store that
  keeps only a bounded cache in memory. Dead-lettering happens in the same event-loop step
  as the removal, so `at-least-once` behaves as `at-most-once` does.
- Delivery limits, `x-delivery-count`, dead-lettering, TTL and `x-overflow` are the core's,
  as for any queue type; the delivery counts of a durable queue are logged beside its
  segments and survive a restart.

Storage is the core's FIFO segment store, handed out as it is (as `classic` does), so the
per-message calls reach the compiled store directly and durability is the segment store's.

Replication, later: the store is append-only, segment files of publish records (`msgs.N`)
and per-segment files of acked positions (`acks.N`), so its state is a log in the sense of
Raft. A follower could replay a leader's records in order into a store of its own (push
for a publish record, ack for an ack entry); a leader would confirm a publisher once a
majority has fsynced what a flush covered, where today one local fsync confirms it. This
type would then wrap the store in `create` in one that ships its records; the core's
calls would not change.
"""

from __future__ import annotations

from pathlib import Path

from lavin.api import Arguments, InvalidArgument, QueueType, StorageToolkit, field_type

DEAD_LETTER_STRATEGIES = ("at-most-once", "at-least-once")


def _integer(arguments: Arguments, argument: str, minimum: int) -> None:
    """RabbitMQ's check of an integer argument, with its reasons."""
    value = arguments.get(argument)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(argument, f'"expected integer, got {field_type(value)}"')
    if value < minimum:
        raise InvalidArgument(argument, f"{{value_negative,{value}}}" if value < 0 else f"{{value_zero,{value}}}")


def check_quorum_arguments(arguments: Arguments) -> None:
    """The quorum-only arguments, checked as RabbitMQ 3.10 checks them."""
    strategy = arguments.get("x-dead-letter-strategy")
    if strategy is not None:
        if isinstance(strategy, bytes):
            strategy = strategy.decode(errors="replace")
        if not isinstance(strategy, str):
            raise InvalidArgument("x-dead-letter-strategy", f"{{unacceptable_type,{field_type(strategy)}}}")
        if strategy not in DEAD_LETTER_STRATEGIES:
            raise InvalidArgument("x-dead-letter-strategy", "invalid_dlx_strategy")
    _integer(arguments, "x-quorum-initial-group-size", 1)
    _integer(arguments, "x-max-in-memory-length", 0)
    _integer(arguments, "x-max-in-memory-bytes", 0)


class QuorumQueue(QueueType):
    """A durable FIFO queue: the core's segment store, as it is.

    As with `classic`, `create` hands out the store itself and the class is never
    instantiated.
    """

    name = "quorum"

    durable_only = True  # the core refuses non-durable, exclusive and auto-delete declarations

    @classmethod
    def create(cls, path: Path, arguments: Arguments, durable: bool, storage: StorageToolkit) -> QueueType:
        check_quorum_arguments(arguments)
        return storage.fifo_store(path, durable)

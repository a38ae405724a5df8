"""Every queue argument the broker knows, one row each, and the docs' table made from them.

The rows are the one place a queue argument is declared. From them come:

- the equivalence check of a redeclare (`compared`, in table order: the first argument that
  differs is the one the 406 names), in `lavin.broker.policy.arguments`;
- the declare-time checks and the `QueueSettings` the core acts on (`kind`, `setting`,
  `requires`, `refused_by`), in `parse_queue_settings` there;
- what a policy may set and with which reason it is refused (`policy_key`, `kind`,
  `policy_reason`), what an operator policy may set (`operator_policy`), and which value a
  queue acts on when both set one (`precedence`, `precedence_by_type`), in
  `lavin.broker.policy.policy_rules`;
- the arguments a stream refuses (`refused_by` naming `stream`), in
  `lavin.broker.queues.stream_queue`;
- the table in docs/queue-semantics.md (`markdown_table`).

To add a queue argument, add its row. When the core acts on it, give the row a `setting`
and add that field to `QueueSettings` (which the queue reads); when a queue type checks it
instead, say which in `checked_by` and leave `setting` out. Then run `python -m
lavin.reference` to redraw the table in docs/queue-semantics.md (tests/test_generated_docs.py
fails until the two agree).

The row types and the kinds of value are in `lavin.broker.policy.argument_rows`.
"""

from __future__ import annotations

from typing import Final

from lavin.broker.policy.argument_rows import (
    Argument,
    Duration,
    Flag,
    Integer,
    OneOf,
    Precedence,
    Requirement,
    Text,
)

STREAM: Final = frozenset({"stream"})
OVERFLOW_MODES: Final = ("drop-head", "reject-publish", "reject-publish-dlx")
MAX_SEGMENT_SIZE: Final = 3_000_000_000  # RabbitMQ's ?MAX_STREAM_MAX_SEGMENT_SIZE
LENGTH_CHECKED_BY: Final = "core; `stream` type on a stream"

QUEUE_ARGUMENTS: Final = (
    Argument("x-queue-type", Text(), checked_by="core (a registered type)", compared=True),
    Argument(
        "x-message-ttl",
        Integer(0, unit="ms"),
        setting="message_ttl",
        compared=True,
        policy_key="message-ttl",
        policy_reason="is not a valid message TTL",
        operator_policy=True,
        precedence=Precedence.LOWEST,
        refused_by=STREAM,
    ),
    Argument(
        "x-expires",
        Integer(1, unit="ms"),
        setting="expires",
        compared=True,
        policy_key="expires",
        policy_reason="is not a valid queue expiry",
        operator_policy=True,
        precedence=Precedence.LOWEST,
        precedence_by_type=(("quorum", Precedence.POLICY),),  # as in RabbitMQ 3.10
        refused_by=STREAM,
    ),
    Argument(
        "x-max-length",
        Integer(0),
        checked_by=LENGTH_CHECKED_BY,
        setting="max_length",
        compared=True,
        policy_key="max-length",
        policy_reason="is not a valid maximum length",
        operator_policy=True,
        precedence=Precedence.LOWEST,
        precedence_by_type=(("stream", None),),
    ),
    Argument(
        "x-max-length-bytes",
        Integer(0, unit="bytes"),
        checked_by=LENGTH_CHECKED_BY,
        setting="max_length_bytes",
        compared=True,
        policy_key="max-length-bytes",
        policy_reason="is not a valid maximum length in bytes",
        operator_policy=True,
        precedence=Precedence.LOWEST,
        precedence_by_type=(("stream", Precedence.POLICY),),  # a stream's retention (`stream_retention`)
    ),
    Argument(
        "x-max-priority",
        Integer(0, 255),
        checked_by="`priority` type",
        compared=True,
        refused_by=frozenset({"quorum", "stream"}),
    ),
    Argument(
        "x-overflow",
        OneOf(OVERFLOW_MODES, default="drop-head", invalid="invalid_overflow"),
        setting="overflow",
        compared=True,
        policy_key="overflow",
        policy_reason="is not a valid overflow value",
        precedence=Precedence.ARGUMENT,
        precedence_by_type=(("quorum", Precedence.POLICY),),  # as in RabbitMQ 3.10
        refused_by=STREAM,
    ),
    Argument(
        "x-dead-letter-exchange",
        Text(),
        setting="dead_letter_exchange",
        compared=True,
        policy_key="dead-letter-exchange",
        policy_reason="is not a valid dead letter exchange name",
        precedence=Precedence.ARGUMENT,
        refused_by=STREAM,
    ),
    Argument(
        "x-dead-letter-routing-key",
        Text(),
        setting="dead_letter_routing_key",
        compared=True,
        requires=Requirement("x-dead-letter-exchange", "routing_key_but_no_dlx_defined"),
        policy_key="dead-letter-routing-key",
        policy_reason="is not a valid dead letter routing key",
        precedence=Precedence.ARGUMENT,
        refused_by=STREAM,
    ),
    Argument("x-single-active-consumer", Flag(), setting="single_active_consumer", compared=True, refused_by=STREAM),
    Argument(
        "x-delivery-limit",
        Integer(0),
        setting="delivery_limit",
        compared=True,
        policy_key="delivery-limit",
        policy_reason="is not a valid delivery limit",
        operator_policy=True,
        precedence=Precedence.LOWEST,
        refused_by=STREAM,
    ),
    Argument(
        "x-queue-mode",
        OneOf(("default", "lazy")),
        checked_by="no one",
        compared=True,
        policy_key="queue-mode",
        policy_reason="is not a valid queue-mode value",
        refused_by=frozenset({"quorum"}),
    ),
    Argument("x-consumer-timeout", Integer(0, unit="ms"), setting="consumer_timeout", compared=True),
    Argument(
        "x-dead-letter-strategy",
        OneOf(("at-most-once", "at-least-once")),
        checked_by="`quorum` type",
        policy_key="dead-letter-strategy",
        policy_reason="is not a valid dead letter strategy",
    ),
    Argument(
        "x-max-in-memory-length",
        Integer(0),
        checked_by="`quorum` type",
        policy_key="max-in-memory-length",
        policy_reason="is not a valid maximum memory in bytes",  # sic, RabbitMQ's
        operator_policy=True,
    ),
    Argument(
        "x-max-in-memory-bytes",
        Integer(0, unit="bytes"),
        checked_by="`quorum` type",
        policy_key="max-in-memory-bytes",
        policy_reason="is not a valid maximum memory in bytes",
        operator_policy=True,
    ),
    Argument("x-quorum-initial-group-size", Integer(1), checked_by="`quorum` type"),
    Argument(
        "x-max-age",
        Duration(),
        checked_by="`stream` type",
        policy_key="max-age",
        policy_reason="is not a valid max age",
        precedence_by_type=(("stream", Precedence.POLICY),),  # a stream's retention (`stream_retention`)
    ),
    Argument(
        "x-stream-max-segment-size-bytes",
        Integer(0, MAX_SEGMENT_SIZE, unit="bytes"),
        checked_by="`stream` type",
        policy_key="stream-max-segment-size-bytes",
        policy_reason="is not a valid segment size",
    ),
    Argument(
        "x-queue-version",
        OneOf((1, 2)),
        checked_by="no one",
        policy_key="queue-version",
        policy_reason="is not a valid queue-version value",
    ),
    Argument(
        "x-queue-leader-locator",
        OneOf(("client-local", "balanced", "random", "least-leaders")),
        checked_by="no one",
        policy_key="queue-leader-locator",
        policy_reason="is not a valid queue leader locator value",
    ),
    Argument(
        "x-initial-cluster-size",
        Integer(0),
        checked_by="no one",
        policy_key="initial-cluster-size",
        policy_reason="is not a valid cluster size",
    ),
)


def refused_by(type_name: str) -> frozenset[str]:
    """The arguments a queue type refuses outright."""
    return frozenset(row.name for row in QUEUE_ARGUMENTS if type_name in row.refused_by)


# ---- the docs' table ------------------------------------------------------------------------

COLUMNS: Final = (
    "argument",
    "value",
    "checked at declare by",
    "compared on redeclare",
    "policy key",
    "operator policies",
    "when both set",
    "refused by",
)


def _precedence_text(precedence: Precedence | None) -> str:
    return "no effect" if precedence is None else precedence.value


def _cells(row: Argument) -> tuple[str, ...]:
    value = row.kind.describe()
    if row.requires is not None:
        value += f"; needs `{row.requires.argument}`"
    if row.policy_key is None:
        policy, operator, wins = "—", "—", "—"
    else:
        policy = f"`{row.policy_key}`"
        operator = "yes" if row.operator_policy else "no"
        exceptions = (f"{type_name}: {_precedence_text(rule)}" for type_name, rule in row.precedence_by_type)
        wins = "; ".join((_precedence_text(row.precedence), *exceptions))
    refused = ", ".join(sorted(row.refused_by)) or "—"
    compared = "yes" if row.compared else "no"
    return (f"`{row.name}`", value, row.checked_by, compared, policy, operator, wins, refused)


def markdown_table() -> str:
    """The rows as the Markdown table docs/queue-semantics.md shows."""
    lines = [COLUMNS, tuple("---" for _ in COLUMNS), *(_cells(row) for row in QUEUE_ARGUMENTS)]
    return "\n".join("| " + " | ".join(line) + " |" for line in lines)

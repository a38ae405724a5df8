"""What a policy is and what it does to a queue, as RabbitMQ defines it.

A policy `{pattern, apply-to, priority, definition}` matches queues and exchanges of its
vhost by name (a regular expression search). Of the policies that match, the one with
the highest priority applies, alone; so does the highest-priority operator policy, whose
numeric limits are merged with the policy's, the lower value winning. Between the
merged definition and a queue's `x-` argument, the lower value wins for the numeric
limits and the argument wins for the rest (for quorum queues the policy wins for
`overflow` and `expires`, as in RabbitMQ 3.10). Validation texts are RabbitMQ's.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from lavin.api.arguments import parse_duration
from lavin.broker.policy.arguments import OVERFLOW_MODES, QueueSettings, parse_queue_settings

APPLY_TO: Final = ("all", "queues", "classic_queues", "quorum_queues", "streams", "exchanges")
# The apply-to value that names a queue type; other types match `all` and `queues` only.
TYPE_APPLY_TO: Final = {
    "classic": "classic_queues",
    "priority": "classic_queues",
    "quorum": "quorum_queues",
    "stream": "streams",
}
MAX_SEGMENT_SIZE: Final = 3_000_000_000  # RabbitMQ's ?MAX_STREAM_MAX_SEGMENT_SIZE


class PolicyError(ValueError):
    """A policy or parameter refused; the message is RabbitMQ's reason."""


def validation_failed(errors: Iterable[str]) -> PolicyError:
    """RabbitMQ's text for refused runtime parameters (policies are ones)."""
    return PolicyError("Validation failed\n\n" + "".join(f"{error}\n" for error in errors))


def erlang_term(value: Any) -> str:
    """A JSON value as RabbitMQ prints it in its reasons (Erlang's ~p)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return f'<<"{escaped}">>'
    if isinstance(value, list):
        return "[" + ",".join(erlang_term(item) for item in value) + "]"
    if isinstance(value, dict):
        return "#{" + ",".join(f"{erlang_term(k)} => {erlang_term(v)}" for k, v in sorted(value.items())) + "}"
    return repr(value)


# ---- definition keys ------------------------------------------------------------------------


def _integer(minimum: int, maximum: int | None = None) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        return (
            isinstance(value, int)
            and not isinstance(value, bool)
            and value >= minimum
            and (maximum is None or value <= maximum)
        )

    return check


def _one_of(*choices: Any) -> Callable[[Any], bool]:
    return lambda value: not isinstance(value, bool) and value in choices


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _duration(value: Any) -> bool:
    return isinstance(value, str) and parse_duration(value) is not None


def _anything(value: Any) -> bool:
    return True


# key -> (check, RabbitMQ's reason after the value); rabbit_policies and the federation
# plugin's keys. Keys Lavin stores without acting on them are here too, so that a
# RabbitMQ export imports: queue-mode, queue-version, the in-memory limits, the cluster
# and mirroring keys (mirroring has no meaning on one node), federation-upstream(-set).
POLICY_KEYS: Final[dict[str, tuple[Callable[[Any], bool], str]]] = {
    "alternate-exchange": (_text, "is not a valid alternate exchange name"),
    "dead-letter-exchange": (_text, "is not a valid dead letter exchange name"),
    "dead-letter-routing-key": (_text, "is not a valid dead letter routing key"),
    "dead-letter-strategy": (_one_of("at-most-once", "at-least-once"), "is not a valid dead letter strategy"),
    "message-ttl": (_integer(0), "is not a valid message TTL"),
    "expires": (_integer(1), "is not a valid queue expiry"),
    "max-length": (_integer(0), "is not a valid maximum length"),
    "max-length-bytes": (_integer(0), "is not a valid maximum length in bytes"),
    "max-in-memory-length": (_integer(0), "is not a valid maximum memory in bytes"),
    "max-in-memory-bytes": (_integer(0), "is not a valid maximum memory in bytes"),
    "queue-mode": (_one_of("default", "lazy"), "is not a valid queue-mode value"),
    "queue-version": (_one_of(1, 2), "is not a valid queue-version value"),
    "overflow": (_one_of(*OVERFLOW_MODES), "is not a valid overflow value"),
    "delivery-limit": (_integer(0), "is not a valid delivery limit"),
    "max-age": (_duration, "is not a valid max age"),
    "stream-max-segment-size-bytes": (_integer(0, MAX_SEGMENT_SIZE), "is not a valid segment size"),
    "queue-leader-locator": (
        _one_of("client-local", "balanced", "random", "least-leaders"),
        "is not a valid queue leader locator value",
    ),
    "initial-cluster-size": (_integer(0), "is not a valid cluster size"),
    "ha-mode": (_anything, ""),
    "ha-params": (_anything, ""),
    "ha-sync-mode": (_anything, ""),
    "ha-sync-batch-size": (_anything, ""),
    "ha-promote-on-shutdown": (_anything, ""),
    "ha-promote-on-failure": (_anything, ""),
    "queue-master-locator": (_anything, ""),
}
# The federation plugin's own check, with its text.
FEDERATION_KEYS: Final = ("federation-upstream", "federation-upstream-set")
OPERATOR_POLICY_KEYS: Final = frozenset(
    {"expires", "message-ttl", "max-length", "max-length-bytes", "max-in-memory-length", "max-in-memory-bytes",
     "delivery-limit"}
)  # fmt: skip
# Merged between a policy and an operator policy, and between them and an argument: the lower wins.
LOWEST_WINS: Final = {
    "message-ttl": "message_ttl",
    "expires": "expires",
    "max-length": "max_length",
    "max-length-bytes": "max_length_bytes",
    "delivery-limit": "delivery_limit",
}
# The queue's argument wins over these.
ARGUMENT_WINS: Final = {
    "overflow": "overflow",
    "dead-letter-exchange": "dead_letter_exchange",
    "dead-letter-routing-key": "dead_letter_routing_key",
}
# A quorum queue takes these from the policy even when an argument sets them.
QUORUM_POLICY_WINS: Final = frozenset({"overflow", "expires"})


def _definition_errors(definition: Any, *, operator: bool) -> list[str]:
    if not isinstance(definition, dict):
        return [f"definition must be a dictionary: {erlang_term(definition)}"]
    if not definition:
        return ["no policy provided"]
    unknown = []
    for key in sorted(definition):
        value = definition[key]
        if key in FEDERATION_KEYS and not operator:
            if not isinstance(value, str):
                return [f"{key} should be binary, actually was {erlang_term(value)}"]
            continue
        rule = POLICY_KEYS.get(key)
        if rule is None or (operator and key not in OPERATOR_POLICY_KEYS):
            unknown.append(key)
        elif not rule[0](value):
            return [f"{erlang_term(value)} {rule[1]}"]
    if unknown:
        terms = ",".join(f"{{{erlang_term(key)},{erlang_term(definition[key])}}}" for key in unknown)
        return [f"[{terms}] are not recognised policy settings"]
    return []


# ---- policies -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Policy:
    """A policy or an operator policy of a vhost."""

    vhost: str
    name: str
    pattern: str
    apply_to: str
    definition: dict[str, Any]
    priority: int | float
    regex: re.Pattern[str] = field(compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        """RabbitMQ's JSON, in its key order."""
        return {
            "vhost": self.vhost,
            "name": self.name,
            "pattern": self.pattern,
            "apply-to": self.apply_to,
            "definition": dict(self.definition),
            "priority": self.priority,
        }

    def matches_queue(self, name: str, type_name: str) -> bool:
        applies = self.apply_to in ("all", "queues") or TYPE_APPLY_TO.get(type_name) == self.apply_to
        return applies and self.regex.search(name) is not None

    def matches_exchange(self, name: str) -> bool:
        return self.apply_to in ("all", "exchanges") and self.regex.search(name) is not None


def parse_policy(vhost: str, name: str, body: Mapping[str, Any], *, operator: bool) -> Policy:
    """A policy from RabbitMQ's JSON (`pattern`, `definition`, optional `priority` (0) and
    `apply-to` (all)); PolicyError with RabbitMQ's reasons."""
    errors = [f'Key "{key}" not found in {name}' for key in ("pattern", "definition") if body.get(key) is None]
    priority = body.get("priority")
    if priority is None:
        priority = 0
    elif isinstance(priority, bool) or not isinstance(priority, int | float):
        errors.append(f"priority should be a number, actually was {erlang_term(priority)}")
    pattern = body.get("pattern")
    regex = None
    if isinstance(pattern, str):
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            errors.append(f"pattern should be regular expression but is invalid: {exc}")
    elif pattern is not None:
        errors.append(f"pattern should be a binary but was {erlang_term(pattern)}")
    apply_to = body.get("apply-to")
    if apply_to is None:
        apply_to = "all"
    elif apply_to not in APPLY_TO:
        errors.append(
            f"apply-to '{apply_to}' unrecognised; should be one of: 'queues', 'classic_queues', "
            " 'quorum_queues', 'streams', 'exchanges', or 'all'"
        )
    definition = body.get("definition")
    if definition is not None:
        errors.extend(_definition_errors(definition, operator=operator))
    if errors:
        raise validation_failed(errors)
    assert isinstance(pattern, str) and regex is not None and isinstance(definition, dict)
    return Policy(vhost, name, pattern, str(apply_to), dict(definition), priority, regex)


def highest(policies: Iterable[Policy], matches: Callable[[Policy], bool]) -> Policy | None:
    """The matching policy of the highest priority. RabbitMQ leaves a tie undefined; here
    the name that sorts first wins, so that the choice does not change across restarts."""
    best: Policy | None = None
    for policy in policies:
        if matches(policy) and (
            best is None
            or policy.priority > best.priority
            or (policy.priority == best.priority and policy.name < best.name)
        ):
            best = policy
    return best


def effective_definition(policy: Policy | None, operator: Policy | None) -> dict[str, Any]:
    """The policy's definition with the operator policy's merged in (RabbitMQ's
    `effective_policy_definition`)."""
    merged = dict(policy.definition) if policy is not None else {}
    for key, value in (operator.definition if operator is not None else {}).items():
        current = merged.get(key)
        if current is None:
            merged[key] = value
        elif key in LOWEST_WINS or key in ("max-in-memory-length", "max-in-memory-bytes"):
            merged[key] = min(current, value)
        elif isinstance(current, bool) and isinstance(value, bool):
            merged[key] = value
    return dict(sorted(merged.items()))


def queue_settings(
    queue: str, vhost: str, arguments: dict[str, Any], type_name: str, definition: Mapping[str, Any]
) -> QueueSettings:
    """What a queue acts on: its arguments (validated at declare), then the definition."""
    settings = parse_queue_settings(queue, vhost, arguments)
    changes: dict[str, Any] = {}
    for key, value in definition.items():
        attribute = LOWEST_WINS.get(key) or ARGUMENT_WINS.get(key)
        if attribute is None:
            continue
        declared = arguments.get(f"x-{key}")
        if declared is None or (type_name == "quorum" and key in QUORUM_POLICY_WINS):
            changes[attribute] = value
        elif key in LOWEST_WINS:
            changes[attribute] = min(getattr(settings, attribute), value)
    if type_name == "quorum" and changes.get("overflow") == "reject-publish-dlx":
        changes["overflow"] = "drop-head"  # as for the argument: quorum queues have no such mode
    return dataclasses.replace(settings, **changes) if changes else settings

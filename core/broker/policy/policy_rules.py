"""What a policy is and what it does to a queue, as RabbitMQ defines it.

A policy `{pattern, apply-to, priority, definition}` matches queues and exchanges of its
vhost by name (a regular expression search). Of the policies that match, the one with
the highest priority applies, alone; so does the highest-priority operator policy, whose
numeric limits are merged with the policy's, the lower value winning. Between the
merged definition and a queue's `x-` argument, each key's row in
`lavin.broker.policy.queue_arguments` says which wins (the lower value, the argument, or
for some queue types the policy), and which keys a policy may set at all. Validation
texts are RabbitMQ's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from lavin.api.patterns import Pattern, PatternError, compile_pattern
from lavin.broker.policy.argument_rows import Argument, Precedence
from lavin.broker.policy.arguments import EXCHANGE_ARGUMENTS, QueueSettings, parse_queue_settings
from lavin.broker.policy.queue_arguments import QUEUE_ARGUMENTS
from lavin.storage.metadata.storable import UnstorableValue, check_value

APPLY_TO: Final = ("all", "queues", "classic_queues", "quorum_queues", "streams", "exchanges")
# The apply-to value that names a queue type; other types match `all` and `queues` only.
TYPE_APPLY_TO: Final = {
    "classic": "classic_queues",
    "priority": "classic_queues",
    "quorum": "quorum_queues",
    "stream": "streams",
}


class PolicyError(ValueError):
    """A policy or parameter refused; the message is RabbitMQ's reason."""


def validation_failed(errors: Iterable[str]) -> PolicyError:
    """RabbitMQ's text for refused runtime parameters (policies are ones)."""
    return PolicyError("Validation failed\n\n" + "".join(f"{error}\n" for error in errors))


def reasons_line(error: PolicyError) -> str:
    """A `validation_failed` error's reasons on one line, for a log or a file error."""
    return str(error).removeprefix("Validation failed\n\n").strip().replace("\n", "; ")


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

# The keys a policy may set: the rows' policy keys (rabbit_policies'), queues' and
# exchanges'. Keys Lavin stores without acting on them are rows too, so that a RabbitMQ
# export imports: queue-mode, queue-version, the in-memory limits, the cluster keys.
POLICY_KEYS: Final[dict[str, Argument]] = {
    row.policy_key: row for row in (*QUEUE_ARGUMENTS, *EXCHANGE_ARGUMENTS) if row.policy_key is not None
}
# Mirroring keys, stored with any value (mirroring has no meaning on one node).
MIRRORING_KEYS: Final = (
    "ha-mode",
    "ha-params",
    "ha-sync-mode",
    "ha-sync-batch-size",
    "ha-promote-on-shutdown",
    "ha-promote-on-failure",
    "queue-master-locator",
)
# The federation plugin's keys, with its own check and text.
FEDERATION_KEYS: Final = ("federation-upstream", "federation-upstream-set")
# An operator policy caps what policies and arguments ask for: it sets numeric limits only,
# and where the policy sets one too, the lower value wins.
OPERATOR_POLICY_KEYS: Final = frozenset(key for key, row in POLICY_KEYS.items() if row.operator_policy)


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
        if key in MIRRORING_KEYS and not operator:
            continue
        row = POLICY_KEYS.get(key)
        if row is None or (operator and key not in OPERATOR_POLICY_KEYS):
            unknown.append(key)
        elif not row.kind.fits_policy(value):
            return [f"{erlang_term(value)} {row.policy_reason}"]
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
    regex: Pattern = field(compare=False, repr=False)

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
        return applies and self.regex.search(name)

    def matches_exchange(self, name: str) -> bool:
        return self.apply_to in ("all", "exchanges") and self.regex.search(name)


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
            regex = compile_pattern(pattern)
        except PatternError as exc:
            errors.append(f"pattern '{pattern}' should be regular expression but is invalid: {exc.reason}")
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
    try:  # first: a definition nested too deep would overflow the checks below
        for what, value in (("policy name", name), (f"pattern of policy '{name}'", pattern)):
            check_value(value, what)
        check_value(definition, f"definition of policy '{name}'")
    except UnstorableValue as exc:
        raise validation_failed([str(exc)]) from None
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
        merged[key] = value if current is None else min(current, value)  # OPERATOR_POLICY_KEYS only
    return dict(sorted(merged.items()))


def queue_settings(
    queue: str, vhost: str, arguments: dict[str, Any], type_name: str, definition: Mapping[str, Any]
) -> QueueSettings:
    """What a queue acts on: its arguments (validated at declare), then the definition."""
    settings = parse_queue_settings(queue, vhost, arguments)
    changes: dict[str, Any] = {}
    for key, value in definition.items():
        row = POLICY_KEYS.get(key)
        if row is None or row.setting is None:
            continue  # not a queue setting
        precedence = row.precedence_for(type_name)
        if precedence is None:
            continue  # stored, with no effect on this type
        if arguments.get(row.name) is None or precedence is Precedence.POLICY:
            changes[row.setting] = value
        elif precedence is Precedence.LOWEST:
            changes[row.setting] = min(getattr(settings, row.setting), value)
    if type_name == "quorum" and changes.get("overflow") == "reject-publish-dlx":
        changes["overflow"] = "drop-head"  # as for the argument: quorum queues have no such mode
    return dataclasses.replace(settings, **changes) if changes else settings

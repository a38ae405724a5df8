"""A vhost's policies, operator policies and runtime parameters: stored in its
`policies.json`, applied to its queues and exchanges when they are declared and again,
live, whenever a policy changes. The rules are in lavin.broker.policy.policy_rules.

Applying costs nothing per message: each queue and exchange is handed the effective
definition once (`PolicySubject.apply_policy`); a queue replaces its `settings` whole and
re-arms its timers and limits once (`Queue.apply_settings`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Protocol

from lavin.api.arguments import parse_duration
from lavin.api.printable import printable
from lavin.api.queue import Retention
from lavin.broker.policy.arguments import queue_type_name
from lavin.broker.policy.policy_rules import (
    Policy,
    PolicyError,
    effective_definition,
    highest,
    parse_policy,
    reasons_line,
    validation_failed,
)
from lavin.storage.metadata.policy_files import POLICIES_FILE, PolicyFileError, read_json_file, write_json_file
from lavin.storage.metadata.storable import UnstorableValue, check_value

log = logging.getLogger(__name__)

# Runtime parameter components Lavin stores for plugins; their values are JSON objects
# (a federation upstream set is a list of them).
PARAMETER_COMPONENTS: Final = ("shovel", "federation-upstream", "federation-upstream-set")


def check_parameter(component: str, value: Any) -> None:
    """PolicyError with RabbitMQ's text unless `component` is known and `value` fits it."""
    if component not in PARAMETER_COMPONENTS:
        raise PolicyError(f"Validation failed\n\ncomponent {component} not found\n")
    if component == "federation-upstream-set":
        if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
            raise PolicyError(f"Validation failed\n\n{component} value must be a list of objects\n")
    elif not isinstance(value, dict):
        raise PolicyError(f"Validation failed\n\n{component} value must be an object\n")
    try:
        check_value(value, f"{component} value")
    except UnstorableValue as exc:
        raise validation_failed([str(exc)]) from None


class ParameterWatcher(Protocol):
    """What runs a vhost's runtime parameters and federation policies (its shovels and
    federation links): it checks a value before it is stored, acts on it after, and hears
    which policy applies to each exchange and queue (the port `lavin.broker.links.vhost_links.VHostLinks`
    implements)."""

    def check_parameter(self, component: str, name: str, value: Any) -> None:
        """Raise PolicyError for a value that cannot run."""

    def parameter_changed(self, component: str, name: str, value: Any | None) -> None:
        """The value was stored (None: cleared)."""

    def policy_applied(self, kind: str, name: str, definition: Mapping[str, Any]) -> None:
        """The effective definition of an "exchange" or "queue" was worked out ({}: none),
        at its declare or after a policy changed."""


class PolicySubject(Protocol):
    """A queue or an exchange as policies match and apply to it (the port that
    `lavin.broker.queues.queue.Queue` and `lavin.broker.routing.exchange.Exchange` implement)."""

    @property
    def name(self) -> str: ...

    @property
    def arguments(self) -> dict[str, Any]: ...

    def apply_policy(self, definition: Mapping[str, Any]) -> None:
        """Act on the effective definition of the policies that now match ({} for none)."""


class VHostPolicies:
    """`vhost.policies`: what the policy endpoints and definitions read and change.
    `queues` and `exchanges` are the vhost's own tables, read whenever a policy changes."""

    def __init__(
        self,
        vhost_name: str,
        data_dir: Path,
        queues: Mapping[str, PolicySubject],
        exchanges: Mapping[str, PolicySubject],
    ) -> None:
        self.vhost_name = vhost_name
        self._path = data_dir / POLICIES_FILE
        self._queues = queues
        self._exchanges = exchanges
        self.policies: dict[str, Policy] = {}
        self.operator_policies: dict[str, Policy] = {}
        self.parameters: dict[tuple[str, str], Any] = {}  # (component, name) -> value
        # Parameters whose link an operator paused (a shovel's pause): kept beside the
        # parameters, not in their values, so that exports stay RabbitMQ's.
        self.paused: frozenset[tuple[str, str]] = frozenset()
        self.watcher: ParameterWatcher | None = None

    # ---- start-up and persistence ----------------------------------------------------------

    def load(self) -> None:
        """Read policies.json; a file that cannot be read or holds something invalid stops
        start-up, naming the file (a silent reset would change every queue it limits)."""
        path = self._path
        document = read_json_file(path)
        if document is None:
            return
        if not isinstance(document, dict):
            raise PolicyFileError(f"{path} must hold an object")
        try:
            self.policies = self._parse_policies(document.get("policies", []), operator=False)
            self.operator_policies = self._parse_policies(document.get("operator_policies", []), operator=True)
            parameters = document.get("parameters", [])
            if not isinstance(parameters, list):
                raise PolicyError("parameters must be a list")
            for entry in parameters:
                if not isinstance(entry, dict) or not isinstance(entry.get("component"), str):
                    raise PolicyError(f"invalid parameter {entry!r}")
                check_parameter(entry["component"], entry.get("value"))
                self.parameters[(entry["component"], str(entry.get("name")))] = entry["value"]
            self.paused = self._parse_paused(document.get("paused", []))
        except PolicyError as exc:
            raise PolicyFileError(f"{path}: {reasons_line(exc)}") from None

    def _parse_policies(self, entries: Any, *, operator: bool) -> dict[str, Policy]:
        if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
            raise PolicyError("policies must be a list of objects")
        policies = {}
        for entry in entries:
            name = entry.get("name")
            if not isinstance(name, str):
                raise PolicyError(f"a policy without a name: {entry!r}")
            policies[name] = parse_policy(self.vhost_name, name, entry, operator=operator)
        return policies

    def _parse_paused(self, entries: Any) -> frozenset[tuple[str, str]]:
        if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
            raise PolicyError("paused must be a list of objects")
        keys = ((entry.get("component"), entry.get("name")) for entry in entries)
        return frozenset(key for key in keys if key in self.parameters)  # a pause outlives no parameter

    def _save(
        self,
        policies: dict[str, Policy],
        operator_policies: dict[str, Policy],
        parameters: dict[tuple[str, str], Any],
        paused: frozenset[tuple[str, str]] | None = None,
    ) -> None:
        """Written before it takes effect: a change that could not be saved (OSError) changes nothing."""
        if paused is None:
            paused = frozenset(key for key in self.paused if key in parameters)
        write_json_file(
            self._path,
            {
                "policies": [policy.to_json() for policy in policies.values()],
                "operator_policies": [policy.to_json() for policy in operator_policies.values()],
                "parameters": [
                    self.parameter_json(component, name, value) for (component, name), value in parameters.items()
                ],
                "paused": [{"component": component, "name": name} for component, name in sorted(paused)],
            },
        )
        self.policies, self.operator_policies, self.parameters = policies, operator_policies, parameters
        self.paused = paused

    # ---- policies --------------------------------------------------------------------------

    def set_policy(self, name: str, body: Mapping[str, Any], *, operator: bool) -> bool:
        """Create or replace a policy from RabbitMQ's JSON and apply it now; True when new.
        PolicyError (400) for an invalid one."""
        policy = parse_policy(self.vhost_name, name, body, operator=operator)
        table = self.operator_policies if operator else self.policies
        created = name not in table
        changed = {**table, name: policy}
        if operator:
            self._save(self.policies, changed, self.parameters)
        else:
            self._save(changed, self.operator_policies, self.parameters)
        log.info(
            "set %s '%s' in vhost '%s' matching %s with pattern '%s'",
            "operator policy" if operator else "policy",
            printable(name),
            printable(self.vhost_name),
            policy.apply_to,
            printable(policy.pattern),
        )
        self.apply_all()
        return created

    def delete_policy(self, name: str, *, operator: bool) -> bool:
        """Remove a policy and its effect; False when there is none of that name."""
        table = self.operator_policies if operator else self.policies
        if name not in table:
            return False
        remaining = {key: policy for key, policy in table.items() if key != name}
        if operator:
            self._save(self.policies, remaining, self.parameters)
        else:
            self._save(remaining, self.operator_policies, self.parameters)
        self.apply_all()
        return True

    # ---- runtime parameters -----------------------------------------------------------------

    def set_parameter(self, component: str, name: str, value: Any) -> bool:
        check_parameter(component, value)
        if self.watcher is not None:
            self.watcher.check_parameter(component, name, value)
        created = (component, name) not in self.parameters
        # A changed parameter starts its link again: a pause ends with it.
        paused = self.paused - {(component, name)}
        self._save(self.policies, self.operator_policies, {**self.parameters, (component, name): value}, paused)
        if self.watcher is not None:
            self.watcher.parameter_changed(component, name, value)
        return created

    def delete_parameter(self, component: str, name: str) -> bool:
        if (component, name) not in self.parameters:
            return False
        remaining = {key: value for key, value in self.parameters.items() if key != (component, name)}
        self._save(self.policies, self.operator_policies, remaining)
        if self.watcher is not None:
            self.watcher.parameter_changed(component, name, None)
        return True

    def set_paused(self, component: str, name: str, paused: bool) -> None:
        """Keep (or drop) a parameter's pause across restarts."""
        key = (component, name)
        held = self.paused | {key} if paused else self.paused - {key}
        if key in self.parameters and held != self.paused:
            self._save(self.policies, self.operator_policies, self.parameters, held)

    def parameter_json(self, component: str, name: str, value: Any) -> dict[str, Any]:
        return {"vhost": self.vhost_name, "component": component, "name": name, "value": value}

    # ---- matching and applying ---------------------------------------------------------------

    def queue_policies(self, queue: PolicySubject) -> tuple[Policy | None, Policy | None]:
        """The policy and the operator policy that apply to `queue`."""
        type_name = queue_type_name(queue.arguments)

        def matches(policy: Policy) -> bool:
            return policy.matches_queue(queue.name, type_name)

        return highest(self.policies.values(), matches), highest(self.operator_policies.values(), matches)

    def exchange_policies(self, exchange: PolicySubject) -> tuple[Policy | None, Policy | None]:
        def matches(policy: Policy) -> bool:
            return policy.matches_exchange(exchange.name)

        return highest(self.policies.values(), matches), highest(self.operator_policies.values(), matches)

    def apply_to_queue(self, queue: PolicySubject) -> None:
        """Hand the queue the definition its policies make: a queue takes the settings its
        arguments and the definition make, a stream the retention (`stream_retention`)."""
        definition = effective_definition(*self.queue_policies(queue))
        queue.apply_policy(definition)
        if self.watcher is not None:
            self.watcher.policy_applied("queue", queue.name, definition)

    def apply_to_exchange(self, exchange: PolicySubject) -> None:
        if not exchange.name:
            return  # the default exchange routes by queue name: an alternate never applies
        definition = effective_definition(*self.exchange_policies(exchange))
        exchange.apply_policy(definition)
        if self.watcher is not None:
            self.watcher.policy_applied("exchange", exchange.name, definition)

    def apply_all(self) -> None:
        """A policy changed: every queue and exchange of the vhost gets what now applies."""
        for queue in list(self._queues.values()):
            self.apply_to_queue(queue)
        for exchange in self._exchanges.values():
            self.apply_to_exchange(exchange)

    def applies_at_declare(self) -> bool:
        """Whether a new queue or exchange needs matching at all (no policies: nothing to do)."""
        return bool(self.policies or self.operator_policies)


def stream_retention(definition: Mapping[str, Any]) -> Retention:
    """The retention a policy's definition sets for a stream (validated: an integer and a duration)."""
    max_bytes = definition.get("max-length-bytes")
    max_age = definition.get("max-age")
    return Retention(
        max_bytes=max_bytes if isinstance(max_bytes, int) else None,
        max_age_ms=parse_duration(max_age) if isinstance(max_age, str) else None,
    )


# ---- the management API's queue and exchange JSON ---------------------------------------------


def policy_fields(policies: VHostPolicies, queue: PolicySubject) -> dict[str, Any]:
    """`policy`, `operator_policy` and `effective_policy_definition` of a queue's JSON, as
    RabbitMQ shows them (null and {} when none applies)."""
    policy, operator = policies.queue_policies(queue)
    return {
        "policy": None if policy is None else policy.name,
        "operator_policy": None if operator is None else operator.name,
        "effective_policy_definition": effective_definition(policy, operator),
    }


def exchange_policy_fields(policies: VHostPolicies, exchange: PolicySubject) -> dict[str, Any]:
    """`policy` of an exchange's JSON; RabbitMQ leaves the key out when none applies."""
    policy, _ = policies.exchange_policies(exchange)
    return {} if policy is None else {"policy": policy.name}

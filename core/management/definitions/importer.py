"""Importing a definitions document (RabbitMQ's JSON): users, vhosts, permissions, topic
permissions, vhost limits, runtime and global parameters, policies, exchanges, queues and
bindings, for the whole broker or into one vhost.

An import is additive, as RabbitMQ's: it creates what is missing and updates users,
permissions, parameters and policies, and leaves an exchange or queue that exists as it
is. Runtime parameters of components Lavin does not know are skipped and said so in the
log. Policies and parameters are checked before anything is imported: one that is invalid
refuses the whole document, naming it; so does any object with a name over 255 bytes, a
lone surrogate or arguments nested deeper than an AMQP table may be. Each other object that
fails is named in the report; the others are still imported.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from lavin.api import errors
from lavin.api.exchange import Destination
from lavin.api.json_input import parse_json
from lavin.api.printable import printable
from lavin.broker.access.access_control import AccessControlError
from lavin.broker.policy.policies import PARAMETER_COMPONENTS, check_parameter
from lavin.broker.policy.policy_rules import PolicyError, parse_policy
from lavin.broker.vhost import VHost
from lavin.config import StartupError
from lavin.management.definitions.document import SECTIONS, VHOST_LIMITS_COMPONENT, VHOST_SECTIONS
from lavin.management.shapes import access as shapes
from lavin.storage.metadata.storable import UnstorableValue, check_name, check_value

if TYPE_CHECKING:
    from lavin.broker.broker import Broker

log = logging.getLogger(__name__)

SINGULAR = {"policies": "policy", "global_parameters": "global parameter"}


class DefinitionsError(ValueError):
    """A document that is not a definitions document; nothing of it was imported."""


# What became of one object: created or updated, left as it was, or of no use to Lavin.
Outcome = Literal["imported", "existing", "unsupported"]


@dataclass
class ImportReport:
    # outcome -> section -> count of objects
    counts: dict[Outcome, dict[str, int]] = field(
        default_factory=lambda: {"imported": {}, "existing": {}, "unsupported": {}}
    )
    failures: list[str] = field(default_factory=list)  # one line per object that failed

    def count(self, outcome: Outcome, section: str, number: int = 1) -> None:
        self.counts[outcome][section] = self.counts[outcome].get(section, 0) + number

    def summary(self, outcome: Outcome) -> str:
        return ", ".join(f"{count} {section}" for section, count in self.counts[outcome].items())


def read_definitions_file(path: Path) -> Any:
    try:
        return parse_json(path.read_bytes())
    except OSError as exc:
        raise DefinitionsError(f"cannot read definitions file {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise DefinitionsError(f"definitions file {path} is not JSON: {exc}") from None


def load_definitions_file(broker: Broker, path: Path) -> None:
    """`[main] load_definitions`, imported on every start. As RabbitMQ, the broker does not
    start when the file cannot be read or an object in it fails."""
    try:
        report = import_definitions(broker, read_definitions_file(path))
    except DefinitionsError as exc:
        raise StartupError(str(exc)) from None
    if report.failures:
        raise StartupError(f"definitions file {path}: " + "; ".join(report.failures))


def import_definitions(broker: Broker, document: Any) -> ImportReport:
    """Apply a definitions document; DefinitionsError (before any change) unless its
    sections are lists of objects."""
    sections = _sections(document)
    _check_storable(sections)
    _check_policies_and_parameters(broker, sections)
    importer = _Importer(broker)
    report = ImportReport()
    for section in SECTIONS:
        apply = importer.appliers[section]
        for item in sections.get(section, []):
            try:
                report.count(apply(item), section)
            except (shapes.BadRequest, AccessControlError, PolicyError, errors.AMQPError) as exc:
                reason = exc.text if isinstance(exc, errors.AMQPError) else str(exc)
                report.failures.append(f"{_singular(section)} {_label(item)}: {reason}")
    for section, items in sections.items():
        if section not in SECTIONS and items:
            report.count("unsupported", section, len(items))
    for failure in report.failures:
        log.error("definitions: %s", printable(failure))
    if report.counts["unsupported"]:
        log.info("definitions: skipped %s: Lavin has no use for them", report.summary("unsupported"))
    if report.counts["existing"]:
        log.info("definitions: left %s as they were", report.summary("existing"))
    log.info("definitions: imported %s", report.summary("imported") or "nothing")
    return report


def import_vhost_definitions(broker: Broker, vhost: VHost, document: Any) -> ImportReport:
    """A per-vhost document: its parameters, policies, queues, exchanges and bindings, all
    into `vhost` (whatever vhost they name); the other sections are left aside."""
    sections = _sections(document)
    scoped = {
        section: [{**item, "vhost": vhost.name} for item in sections.get(section, [])] for section in VHOST_SECTIONS
    }
    return import_definitions(broker, scoped)


def _sections(document: Any) -> dict[str, list[Any]]:
    """The document's lists, by key; those Lavin imports must hold objects only. Other keys
    (versions, product names) are left aside."""
    if not isinstance(document, dict):
        raise DefinitionsError("a definitions document is a JSON object")
    sections = {key: items for key, items in document.items() if isinstance(items, list)}
    for key in SECTIONS:
        items = document.get(key, [])
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            raise DefinitionsError(f"'{key}' must be a list of objects")
    return sections


def _singular(section: str) -> str:
    return SINGULAR.get(section, section[:-1].replace("_", " "))


# The fields of each section that are AMQP short strings: names, and routing keys.
_SHORT_STRINGS = ("name", "vhost", "user", "type", "source", "destination", "routing_key", "exchange")


def _check_storable(sections: Mapping[str, list[Any]]) -> None:
    """DefinitionsError naming the first object whose names or values Lavin could not store
    (too long a name, a lone surrogate, arguments nested too deep), before anything is
    imported: the document is applied whole or refused."""
    for section in SECTIONS:
        for item in sections.get(section, []):
            try:
                for key, value in item.items():
                    if key in _SHORT_STRINGS and isinstance(value, str):
                        check_name(value, key)
                    else:
                        check_value(key, "a key")
                        check_value(value, key, field_table=key == "arguments")
            except UnstorableValue as exc:
                raise DefinitionsError(f"{_singular(section)} {_label(item)}: {exc}") from None


def _check_policies_and_parameters(broker: Broker, sections: Mapping[str, list[Any]]) -> None:
    """DefinitionsError naming the first policy or parameter that cannot be imported, before
    anything is: a half-applied set of policies would leave queues limited by some."""
    vhosts = set(broker.vhosts) | {item.get("name") for item in sections.get("vhosts", [])}

    def refuse(section: str, item: Mapping[str, Any], reason: str) -> DefinitionsError:
        return DefinitionsError(f"{_singular(section)} {_label(item)}: {reason}")

    for item in sections.get("policies", []):
        name, vhost = item.get("name"), item.get("vhost")
        if not isinstance(name, str) or not isinstance(vhost, str):
            raise refuse("policies", item, "a policy needs a name and a vhost")
        if vhost not in vhosts:
            raise refuse("policies", item, f"vhost '{vhost}' does not exist")
        try:
            parse_policy(vhost, name, item, operator=False)
        except PolicyError as exc:
            raise refuse("policies", item, str(exc).strip()) from None
    for item in sections.get("parameters", []):
        component = item.get("component")
        if component not in PARAMETER_COMPONENTS:
            continue
        if not isinstance(item.get("name"), str) or item.get("vhost") not in vhosts:
            raise refuse("parameters", item, "a parameter needs a name and an existing vhost")
        try:
            check_parameter(component, item.get("value"))
            broker.shovel_endpoints.check_parameter(component, item["name"], item.get("value"))
        except PolicyError as exc:
            raise refuse("parameters", item, str(exc).strip()) from None
    for item in sections.get("global_parameters", []):
        if not isinstance(item.get("name"), str) or "value" not in item:
            raise refuse("global_parameters", item, "a global parameter needs a name and a value")


def _label(item: Mapping[str, Any]) -> str:
    name = item.get("name", item.get("user", item.get("source", "?")))
    vhost = item.get("vhost")
    return f"'{name}'" if vhost is None else f"'{name}' in vhost '{vhost}'"


class _Importer:
    """One applier per section, which says what became of the object."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.access = broker.access
        self.appliers: dict[str, Callable[[dict[str, Any]], Outcome]] = {
            "users": self.user,
            "vhosts": self.vhost,
            "permissions": self.permission,
            "parameters": self.parameter,
            "global_parameters": self.global_parameter,
            "policies": self.policy,
            "exchanges": self.exchange,
            "topic_permissions": self.topic_permission,
            "queues": self.queue,
            "bindings": self.binding,
        }

    def user(self, item: dict[str, Any]) -> Outcome:
        (name,) = shapes.required(item, "name")
        shapes.put_user(self.access, shapes.text(name, "name"), item)
        return "imported"

    def vhost(self, item: dict[str, Any]) -> Outcome:
        name = shapes.text(shapes.required(item, "name")[0], "name")
        if name not in self.access.vhosts():
            self.access.add_vhost(name)
        # RabbitMQ 3.10 also writes the limits here, as [[name, value], ...]; 4.x as an object.
        limits = item.get("limits")
        if isinstance(limits, list):
            if not all(isinstance(pair, list) and len(pair) == 2 for pair in limits):
                raise shapes.BadRequest("vhost limits must be an object or a list of [name, value] pairs")
            limits = dict(limits)
        if isinstance(limits, dict) and limits:
            self.access.set_vhost_limits(name, limits)
        return "imported"

    def permission(self, item: dict[str, Any]) -> Outcome:
        user, vhost = shapes.required(item, "user", "vhost")
        self.access.set_permissions(
            shapes.text(user, "user"), shapes.text(vhost, "vhost"), shapes.vhost_permissions(item)
        )
        return "imported"

    def topic_permission(self, item: dict[str, Any]) -> Outcome:
        user, vhost = shapes.required(item, "user", "vhost")
        exchange, permissions = shapes.topic_permissions(item)
        self.access.set_topic_permissions(shapes.text(user, "user"), shapes.text(vhost, "vhost"), exchange, permissions)
        return "imported"

    def parameter(self, item: dict[str, Any]) -> Outcome:
        component = item.get("component")
        if component in PARAMETER_COMPONENTS:
            self._vhost(item).policies.set_parameter(component, item["name"], item.get("value"))
            return "imported"
        if component != VHOST_LIMITS_COMPONENT:
            return "unsupported"
        vhost, value = shapes.required(item, "vhost", "value")
        if not isinstance(value, dict):
            raise shapes.BadRequest("vhost limits must be an object")
        self.access.set_vhost_limits(shapes.text(vhost, "vhost"), value)
        return "imported"

    def global_parameter(self, item: dict[str, Any]) -> Outcome:
        self.broker.global_parameters.set(item["name"], item["value"])
        return "imported"

    def policy(self, item: dict[str, Any]) -> Outcome:
        """Set as RabbitMQ sets it: a policy of that name is replaced."""
        self._vhost(item).policies.set_policy(item["name"], item, operator=False)
        return "imported"

    def exchange(self, item: dict[str, Any]) -> Outcome:
        name, type_name = shapes.required(item, "name", "type")
        name, type_name = shapes.text(name, "name"), shapes.text(type_name, "type")
        vhost = self._vhost(item)
        if not name or name.startswith("amq.") or name in vhost.exchanges:
            return "existing"
        vhost.declare_exchange(
            name,
            type_name,
            passive=False,
            durable=bool(item.get("durable", True)),
            auto_delete=bool(item.get("auto_delete", False)),
            internal=bool(item.get("internal", False)),
            arguments=_arguments(item),
        )
        return "imported"

    def queue(self, item: dict[str, Any]) -> Outcome:
        name = shapes.text(shapes.required(item, "name")[0], "name")
        vhost = self._vhost(item)
        if name.startswith("amq."):  # server-named: RabbitMQ skips them too
            return "unsupported"
        if name in vhost.queues:
            return "existing"
        arguments = _arguments(item)
        queue_type = item.get("type")
        if isinstance(queue_type, str) and queue_type != "classic":
            arguments.setdefault("x-queue-type", queue_type)
        vhost.declare_queue(
            name,
            None,
            passive=False,
            durable=bool(item.get("durable", True)),
            exclusive=False,
            auto_delete=bool(item.get("auto_delete", False)),
            arguments=arguments,
        )
        return "imported"

    def binding(self, item: dict[str, Any]) -> Outcome:
        source, destination, kind = shapes.required(item, "source", "destination", "destination_type")
        vhost = self._vhost(item)
        routing_key = shapes.text(item.get("routing_key", ""), "routing_key")
        target: Destination
        if kind == "queue":
            target = vhost.get_queue(shapes.text(destination, "destination"))
        elif kind == "exchange":
            target = vhost.get_exchange(shapes.text(destination, "destination"))
        else:
            raise shapes.BadRequest("destination_type must be queue or exchange")
        vhost.bind(vhost.get_exchange(shapes.text(source, "source")), target, routing_key, _arguments(item))
        return "imported"

    def _vhost(self, item: Mapping[str, Any]) -> VHost:
        name = shapes.text(shapes.required(item, "vhost")[0], "vhost")
        vhost = self.broker.vhosts.get(name)
        if vhost is None:
            raise shapes.BadRequest(f"vhost '{name}' does not exist")
        return vhost


def _arguments(item: Mapping[str, Any]) -> dict[str, Any]:
    arguments = item.get("arguments") or {}
    if not isinstance(arguments, dict):
        raise shapes.BadRequest("arguments must be an object")
    return dict(arguments)

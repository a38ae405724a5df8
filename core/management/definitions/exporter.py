"""Exporting definitions in RabbitMQ's JSON: the whole broker's document, one vhost's, and a
vhost's runtime parameters as RabbitMQ lists them (the API's `/api/parameters` reads those
here too, so both show vhost limits the same way)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lavin import __version__
from lavin.broker.vhost import VHost
from lavin.management.definitions.document import VHOST_LIMITS_COMPONENT, VHOST_SECTIONS
from lavin.management.shapes import access as shapes

if TYPE_CHECKING:
    from lavin.broker.broker import Broker


def export_definitions(broker: Broker) -> dict[str, Any]:
    """Everything `import_definitions` takes, in RabbitMQ 3.x's layout (vhost limits as
    runtime parameters), so RabbitMQ and LavinMQ import it too."""
    access = broker.access
    vhost_names = sorted(access.vhosts())
    vhosts = [broker.vhosts[name] for name in vhost_names if name in broker.vhosts]
    return {
        # RabbitMQ's keys for the version that wrote the document: this broker's.
        "rabbit_version": __version__,
        "rabbitmq_version": __version__,
        "product_name": "Lavin",
        "product_version": __version__,
        "users": [shapes.user_json(user) for user in sorted(access.users(), key=lambda user: user.name)],
        "vhosts": [
            {"name": name, "limits": access.vhost_limits(name), "metadata": {"description": "", "tags": []}}
            for name in vhost_names
        ],
        "permissions": [
            shapes.permission_json(user, vhost, permissions)
            for user, vhost, permissions in sorted(access.permissions(), key=lambda entry: (entry[1], entry[0]))
        ],
        "topic_permissions": [
            shapes.topic_permission_json(user, vhost, exchange, permissions)
            for user, vhost, exchange, permissions in sorted(
                access.topic_permissions(), key=lambda entry: (entry[1], entry[0], entry[2])
            )
        ],
        "parameters": [item for vhost in vhosts for item in parameters_json(broker, vhost)],
        "global_parameters": broker.global_parameters.to_json(),
        "policies": [policy.to_json() for vhost in vhosts for policy in vhost.policies.policies.values()],
        "queues": [
            {
                "name": queue.name,
                "vhost": vhost.name,
                "durable": queue.durable,
                "auto_delete": queue.auto_delete,
                "arguments": dict(queue.arguments),
            }
            for vhost in vhosts
            for queue in vhost.queues.values()
            if queue.exclusive_owner is None
        ],
        "exchanges": [
            {
                "name": exchange.name,
                "vhost": vhost.name,
                "type": exchange.type_name,
                "durable": exchange.durable,
                "auto_delete": exchange.auto_delete,
                "internal": exchange.internal,
                "arguments": dict(exchange.arguments),
            }
            for vhost in vhosts
            for exchange in vhost.exchanges.values()
            if exchange.name and not exchange.name.startswith("amq.")
        ],
        "bindings": [
            {
                "source": exchange.name,
                "vhost": vhost.name,
                "destination": binding.destination.name,
                "destination_type": binding.destination.kind,
                "routing_key": binding.routing_key,
                "arguments": dict(binding.arguments),
            }
            for vhost in vhosts
            for exchange in vhost.exchanges.values()
            if exchange.name
            for binding in exchange.table.bindings()
        ],
    }


def parameters_json(broker: Broker, vhost: VHost) -> list[dict[str, Any]]:
    """A vhost's runtime parameters as RabbitMQ lists them: its limits (component
    `vhost-limits`) and the parameters stored for plugins."""
    policies = vhost.policies
    items = [
        policies.parameter_json(component, name, value) for (component, name), value in policies.parameters.items()
    ]
    limits = broker.access.vhost_limits(vhost.name)
    if limits:
        items.insert(0, policies.parameter_json(VHOST_LIMITS_COMPONENT, "limits", limits))
    return items


def export_vhost_definitions(broker: Broker, vhost: VHost) -> dict[str, Any]:
    """RabbitMQ's per-vhost document: parameters and policies, and the vhost's queues,
    exchanges and bindings without their `vhost` key."""
    everything = export_definitions(broker)
    document: dict[str, Any] = {"rabbit_version": __version__}
    for section in VHOST_SECTIONS:
        kept = [item for item in everything[section] if item.get("vhost") == vhost.name]
        if section in ("queues", "exchanges", "bindings"):
            kept = [{key: value for key, value in item.items() if key != "vhost"} for item in kept]
        document[section] = kept
    return document

"""What a definitions document holds, for the importer and the exporter alike: its sections
in the order they are applied, those of a per-vhost document, and the runtime-parameter
component that carries vhost limits."""

from __future__ import annotations

# Runtime parameters of this component hold vhost limits (RabbitMQ 3.x exports them so).
VHOST_LIMITS_COMPONENT = "vhost-limits"
# Sections in the order RabbitMQ applies them: what a later one names exists by then.
# Policies come before queues and exchanges, which get them when they are declared.
SECTIONS = (
    "users",
    "vhosts",
    "permissions",
    "parameters",
    "global_parameters",
    "policies",
    "exchanges",
    "topic_permissions",
    "queues",
    "bindings",
)
# What a per-vhost document (`/api/definitions/{vhost}`) holds.
VHOST_SECTIONS = ("parameters", "policies", "queues", "exchanges", "bindings")

"""A shovel's parameter value, checked and read once: which endpoint classes serve its
URIs, its ack mode and reconnect delay. What each endpoint needs of the value is checked
by the endpoint's own `validate`; everything is checked before the value is stored."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar
from urllib.parse import unquote, urlsplit

from lavin.api.shovel import AckMode, InvalidEndpoint, ShovelDestination, ShovelEndpoint, ShovelSource
from lavin.broker.policy.policy_rules import erlang_term, validation_failed

DEFAULT_RECONNECT_DELAY: Final = 5.0  # seconds, as RabbitMQ's and LavinMQ's shovels
PROTOCOL: Final = "amqp091"  # the only `src-protocol` / `dest-protocol` Lavin speaks
E = TypeVar("E", bound=ShovelEndpoint)
# The schemes whose URIs with no host mean this broker (`file:///path` names a file).
LOCAL_SCHEMES: Final = frozenset(("amqp", "amqps"))


@dataclass(frozen=True)
class ShovelDefinition:
    name: str
    value: Mapping[str, Any]
    source_uris: tuple[str, ...]
    destination_uris: tuple[str, ...]
    source_classes: Mapping[str, type[ShovelSource]]  # by scheme, for each URI's
    destination_classes: Mapping[str, type[ShovelDestination]]
    ack_mode: AckMode
    reconnect_delay: float  # 0: an error ends the shovel


def local_vhosts(value: Any, own_vhost: str) -> set[str]:
    """The vhosts of this broker that a shovel value's URIs name (no host: this broker):
    who sets the shovel must have access to each. Malformed URIs are parse_shovel's to refuse."""
    named: set[str] = set()
    if not isinstance(value, Mapping):
        return named
    for key in ("src-uri", "dest-uri"):
        uris = value.get(key)
        for uri in [uris] if isinstance(uris, str) else uris if isinstance(uris, list) else []:
            vhost = local_vhost(uri, own_vhost) if isinstance(uri, str) else None
            if vhost is not None:
                named.add(vhost)
    return named


def local_vhost(uri: str, own_vhost: str) -> str | None:
    """The vhost a URI with no host names on this broker (its path, else the link's own
    vhost); None for a URI that names a host."""
    parts = urlsplit(uri)
    if parts.hostname or parts.scheme.lower() not in LOCAL_SCHEMES:
        return None
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    return unquote(path) if path else own_vhost


def parse_shovel(
    name: str,
    value: Mapping[str, Any],
    sources: Mapping[str, type[ShovelSource]],
    destinations: Mapping[str, type[ShovelDestination]],
) -> ShovelDefinition:
    """The definition, or PolicyError with every reason it cannot run (RabbitMQ's
    "Validation failed" text, a 400 on the parameter PUT)."""
    reasons: list[str] = []
    for key in ("src-protocol", "dest-protocol"):
        if value.get(key, PROTOCOL) != PROTOCOL:
            reasons.append(f"{key} {erlang_term(value[key])} is not supported (only {PROTOCOL})")
    source_uris = _uris(value, "src-uri", reasons)
    destination_uris = _uris(value, "dest-uri", reasons)
    source_classes = _endpoint_classes(source_uris, sources, "source", value, reasons)
    destination_classes = _endpoint_classes(destination_uris, destinations, "destination", value, reasons)
    ack_mode = read_ack_mode(value, reasons)
    delay = read_reconnect_delay(value, DEFAULT_RECONNECT_DELAY, reasons)
    if reasons:
        raise validation_failed(reasons)
    return ShovelDefinition(
        name, value, source_uris, destination_uris, source_classes, destination_classes, ack_mode, delay
    )


def _uris(value: Mapping[str, Any], key: str, reasons: list[str]) -> tuple[str, ...]:
    """A URI or a non-empty list of them (one is picked per start)."""
    raw = value.get(key)
    if raw is None:
        reasons.append(f'Key "{key}" not found in shovel')
        return ()
    uris = [raw] if isinstance(raw, str) else raw
    if not isinstance(uris, list) or not uris or not all(isinstance(uri, str) for uri in uris):
        reasons.append(f"{key} should be a URI or a non-empty list of URIs, actually was {erlang_term(raw)}")
        return ()
    return tuple(uris)


def _endpoint_classes(
    uris: Sequence[str], installed: Mapping[str, type[E]], role: str, value: Mapping[str, Any], reasons: list[str]
) -> dict[str, type[E]]:
    classes: dict[str, type[E]] = {}
    for uri in uris:
        scheme = urlsplit(uri).scheme.lower()
        endpoint = installed.get(scheme)
        if endpoint is None:
            known = ", ".join(sorted(installed)) or "none"
            reasons.append(f"{role} URI scheme {scheme or '(none)'!r} is not installed ({known} are)")
            continue
        try:
            endpoint.validate(uri, value)
        except InvalidEndpoint as exc:
            reasons.append(str(exc))
            continue
        classes[scheme] = endpoint
    return classes


def read_ack_mode(value: Mapping[str, Any], reasons: list[str]) -> AckMode:
    """`ack-mode` (default on-confirm), for shovels and federation upstreams alike."""
    raw = value.get("ack-mode", AckMode.ON_CONFIRM.value)
    try:
        return AckMode(raw)
    except ValueError:
        modes = ", ".join(mode.value for mode in AckMode)
        reasons.append(f"ack-mode should be one of {modes}, actually was {erlang_term(raw)}")
        return AckMode.ON_CONFIRM


def read_reconnect_delay(value: Mapping[str, Any], default: float, reasons: list[str]) -> float:
    """`reconnect-delay` in seconds, for shovels and federation upstreams alike."""
    delay = value.get("reconnect-delay", default)
    if isinstance(delay, bool) or not isinstance(delay, (int, float)) or delay < 0:
        reasons.append(f"reconnect-delay should be a number of at least 0, actually was {erlang_term(delay)}")
        return default
    return float(delay)

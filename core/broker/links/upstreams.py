"""Federation upstreams (`federation-upstream` parameters) and upstream sets
(`federation-upstream-set`), checked before they are stored and read with RabbitMQ's
defaults. A policy names one upstream (`federation-upstream`) or a set
(`federation-upstream-set`; `all` is every upstream of the vhost)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

from lavin.api.shovel import AckMode, ShovelSource
from lavin.broker.links.definition import read_ack_mode, read_reconnect_delay
from lavin.broker.policy.policy_rules import PolicyError, erlang_term, validation_failed

UPSTREAM_COMPONENT: Final = "federation-upstream"
UPSTREAM_SET_COMPONENT: Final = "federation-upstream-set"
ALL_UPSTREAMS: Final = "all"
DEFAULT_PREFETCH: Final = 1000
DEFAULT_RECONNECT_DELAY: Final = 5.0
DEFAULT_MAX_HOPS: Final = 1


@dataclass(frozen=True)
class Upstream:
    name: str
    uris: tuple[str, ...]
    exchange: str | None  # None: the downstream exchange's own name
    queue: str | None  # None: the downstream queue's own name
    prefetch_count: int = DEFAULT_PREFETCH
    reconnect_delay: float = DEFAULT_RECONNECT_DELAY
    ack_mode: AckMode = AckMode.ON_CONFIRM
    max_hops: int = DEFAULT_MAX_HOPS
    expires: int | None = None  # ms: the upstream queue's x-expires
    message_ttl: int | None = None  # ms: the upstream queue's x-message-ttl
    trust_user_id: bool = False


def parse_upstream(name: str, value: Mapping[str, Any], sources: Mapping[str, type[ShovelSource]]) -> Upstream:
    """The upstream, or PolicyError with every reason it cannot serve."""
    reasons: list[str] = []
    raw_uris = value.get("uri")
    uris = [raw_uris] if isinstance(raw_uris, str) else raw_uris
    if raw_uris is None:
        reasons.append('Key "uri" not found in federation-upstream')
        uris = []
    elif not isinstance(uris, list) or not uris or not all(isinstance(uri, str) for uri in uris):
        reasons.append(f"uri should be a URI or a non-empty list of URIs, actually was {erlang_term(raw_uris)}")
        uris = []
    for uri in uris:
        scheme = urlsplit(uri).scheme.lower()
        if scheme not in sources:
            known = ", ".join(sorted(sources)) or "none"
            reasons.append(f"upstream URI scheme {scheme or '(none)'!r} is not installed ({known} are)")
    for key in ("exchange", "queue"):
        if key in value and not isinstance(value[key], str):
            reasons.append(f"{key} should be a string, actually was {erlang_term(value[key])}")
    prefetch = _whole(value, "prefetch-count", DEFAULT_PREFETCH, 1, reasons)
    max_hops = _whole(value, "max-hops", DEFAULT_MAX_HOPS, 1, reasons)
    expires = _whole(value, "expires", None, 1, reasons)
    message_ttl = _whole(value, "message-ttl", None, 0, reasons)
    delay = read_reconnect_delay(value, DEFAULT_RECONNECT_DELAY, reasons)
    ack_mode = read_ack_mode(value, reasons)
    trust = value.get("trust-user-id", False)
    if not isinstance(trust, bool):
        reasons.append(f"trust-user-id should be a boolean, actually was {erlang_term(trust)}")
    if reasons:
        raise validation_failed(reasons)
    return Upstream(
        name,
        tuple(uris),
        value.get("exchange"),
        value.get("queue"),
        prefetch or DEFAULT_PREFETCH,
        delay,
        ack_mode,
        max_hops or DEFAULT_MAX_HOPS,
        expires,
        message_ttl,
        trust,
    )


def _whole(value: Mapping[str, Any], key: str, default: int | None, least: int, reasons: list[str]) -> int | None:
    raw = value.get(key, default)
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < least:
        reasons.append(f"{key} should be an integer of at least {least}, actually was {erlang_term(raw)}")
        return default
    return raw


def check_upstream_set(value: Any) -> None:
    """A set is a list of `{"upstream": NAME, ...}`, each naming an upstream (which may be
    defined later: a set naming a missing one just has no link for it)."""
    if not all(isinstance(item, dict) and isinstance(item.get("upstream"), str) for item in value):
        raise PolicyError('Validation failed\n\nevery member of an upstream set needs an "upstream" name\n')


def upstreams_for(
    definition: Mapping[str, Any], parameters: Mapping[tuple[str, str], Any]
) -> list[tuple[str, Mapping[str, Any]]]:
    """The upstreams a policy's definition federates from, in order: each name with its
    value, a set member's own keys laid over the upstream's."""
    single = definition.get(UPSTREAM_COMPONENT)
    if isinstance(single, str):
        members: list[Mapping[str, Any]] = [{"upstream": single}]
    else:
        chosen = definition.get(UPSTREAM_SET_COMPONENT)
        if not isinstance(chosen, str):
            return []
        if chosen == ALL_UPSTREAMS:
            members = [{"upstream": name} for component, name in sorted(parameters) if component == UPSTREAM_COMPONENT]
        else:
            members = [item for item in parameters.get((UPSTREAM_SET_COMPONENT, chosen), []) if isinstance(item, dict)]
    found: list[tuple[str, Mapping[str, Any]]] = []
    for member in members:
        name = member.get("upstream")
        upstream = parameters.get((UPSTREAM_COMPONENT, name)) if isinstance(name, str) else None
        if isinstance(name, str) and isinstance(upstream, dict):
            found.append((name, {**upstream, **{key: value for key, value in member.items() if key != "upstream"}}))
    return found

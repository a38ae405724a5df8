"""Federation links of a vhost: for every exchange or queue a policy federates
(`federation-upstream` or `federation-upstream-set`), one link per upstream.

- Exchange federation: the link declares a queue on the upstream
  (`federation: EXCHANGE -> DOWNSTREAM`, with the upstream's `expires` and `message-ttl`),
  binds it to the upstream exchange with every binding the downstream exchange has (and
  follows them as they come and go), and publishes what arrives to the downstream
  exchange with its routing key.
- Queue federation: the link consumes the upstream queue only while the downstream queue
  has a consumer ready for a message and nothing ready of its own (RabbitMQ's
  consumer-driven federation), and publishes to the downstream queue.

Every message gets an `x-received-from` entry (`uri`, `exchange` or, from a queue link,
`queue`, `redelivered`, `cluster-name`), and one from a queue link the exchange and routing
key it was first published with; one that has already made `max-hops` hops is dropped,
which ends cycles.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final
from urllib.parse import quote, urlsplit

from lavin.api.printable import printable
from lavin.api.shovel import EndpointFailure, LocalBroker, ShovelMessage, ShovelSource
from lavin.broker.links.definition import ShovelDefinition
from lavin.broker.links.endpoints import EndpointClasses
from lavin.broker.links.link import RUNNING, BackgroundStops, ShovelLink, without_credentials
from lavin.broker.links.upstreams import Upstream, parse_upstream, upstreams_for
from lavin.broker.policy.policy_rules import PolicyError, reasons_line
from lavin.broker.queues.queue import Queue
from lavin.broker.routing.exchange import Exchange

log = logging.getLogger(__name__)

EXCHANGE: Final = "exchange"
QUEUE: Final = "queue"
CONSUMER_CHECK_INTERVAL: Final = 0.2  # seconds between looks at a federated queue's consumers
RECEIVED_FROM: Final = "x-received-from"
ORIGINAL_EXCHANGE: Final = "x-original-exchange"
ORIGINAL_ROUTING_KEY: Final = "x-original-routing-key"

# A binding of the downstream exchange as the upstream queue is bound: key and arguments.
BindingKey = tuple[str, tuple[tuple[str, Any], ...]]


@dataclass(frozen=True)
class Federated:
    """A federated exchange or queue of the vhost and the upstream it takes from."""

    kind: str  # EXCHANGE or QUEUE
    name: str
    upstream: str


class FederationLink:
    def __init__(self, federated: Federated, upstream: Upstream, vhost: VHostFederation) -> None:
        self.federated = federated
        self.upstream = upstream
        self._vhost = vhost
        self.uri = upstream.uris[0]
        self.upstream_name = (upstream.exchange if federated.kind == EXCHANGE else upstream.queue) or federated.name
        self.bindings: set[BindingKey] = set()  # what the upstream queue should be bound with
        self._bound: set[BindingKey] = set()  # what it is bound with in this session
        self._syncing: asyncio.Task[None] | None = None
        self._watching: asyncio.Task[None] | None = None
        self._paused = False  # queue federation: the source is held for want of consumers
        self.link = ShovelLink(
            vhost.name,
            self._definition(vhost),
            vhost.local,
            lambda _link: None,  # a federation link's source never ends
            transform=self._received_from,
            opened=self._opened,
        )

    @property
    def id(self) -> str:
        """RabbitMQ's short link id: stable for the same exchange or queue and upstream."""
        key = f"{self._vhost.name}\0{self.federated.kind}\0{self.federated.name}\0{self.upstream.name}"
        return hashlib.sha1(key.encode()).hexdigest()[:8]

    def _definition(self, vhost: VHostFederation) -> ShovelDefinition:
        federated, upstream = self.federated, self.upstream
        local = "amqp:///" + quote(vhost.name, safe="")
        value: dict[str, Any] = {"src-uri": list(upstream.uris), "src-prefetch-count": upstream.prefetch_count}
        value["dest-uri"] = local
        if federated.kind == EXCHANGE:
            arguments = {"x-expires": upstream.expires, "x-message-ttl": upstream.message_ttl}
            value["src-queue"] = f"federation: {federated.name} -> {vhost.downstream_id}"
            value["src-queue-args"] = {key: number for key, number in arguments.items() if number is not None}
            value["src-binding-exchange"] = self.upstream_name
            value["dest-exchange"] = federated.name
        else:
            value["src-queue"] = self.upstream_name
            value["dest-queue"] = federated.name
        sources = vhost.endpoints.sources
        destinations = vhost.endpoints.destinations
        schemes = {urlsplit(uri).scheme.lower() for uri in upstream.uris}
        return ShovelDefinition(
            name=f"federation: {federated.kind} {federated.name} <- {upstream.name}",
            value=value,
            source_uris=upstream.uris,
            destination_uris=(local,),
            source_classes={scheme: sources[scheme] for scheme in schemes},
            destination_classes={"amqp": destinations["amqp"]},
            ack_mode=upstream.ack_mode,
            reconnect_delay=upstream.reconnect_delay or 1.0,  # a federation link always comes back
        )

    def start(self) -> None:
        self.link.start()
        if self.federated.kind == QUEUE and self._watching is None:
            self._watching = asyncio.get_running_loop().create_task(self._follow_consumers())

    async def stop(self) -> None:
        for task in (self._watching, self._syncing):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._watching = self._syncing = None
        await self.link.stop()

    # ---- each message ----------------------------------------------------------------------

    def _received_from(self, message: ShovelMessage) -> ShovelMessage | None:
        headers = dict(message.properties.get("headers") or {})
        trail = headers.get(RECEIVED_FROM)
        hops = list(trail) if isinstance(trail, list) else []
        if len(hops) >= self.upstream.max_hops:
            return None
        source = self.link.source
        uri = source.settings.uri if source is not None else self.uri
        if self.federated.kind == QUEUE:
            # Republished to the downstream queue by name: keep where it was first sent, as RabbitMQ does.
            headers.setdefault(ORIGINAL_EXCHANGE, message.exchange)
            headers.setdefault(ORIGINAL_ROUTING_KEY, message.routing_key)
            origin = ("queue", self.federated.name)  # RabbitMQ names the downstream queue
        else:
            origin = ("exchange", self.federated.name)  # as RabbitMQ: the downstream exchange
        hops.append(
            {
                "uri": without_credentials(uri),
                origin[0]: origin[1],
                "redelivered": message.redelivered,
                "cluster-name": urlsplit(uri).hostname or self._vhost.downstream_id,
            }
        )
        headers[RECEIVED_FROM] = hops
        properties = {**message.properties, "headers": headers}
        if not self.upstream.trust_user_id:
            properties.pop("user_id", None)  # the local connection's user would not match it
        return replace(message, properties=properties)

    # ---- exchange federation: the upstream queue's bindings ---------------------------------

    async def _opened(self, source: ShovelSource) -> None:
        self._bound = set()
        if self.federated.kind == EXCHANGE:
            await self._bind_all(source)
        elif not self._vhost.wants_messages(self.federated.name):
            await _maybe(source.pause())
            self._paused = True
        else:
            self._paused = False

    def bindings_changed(self, bindings: set[BindingKey]) -> None:
        self.bindings = bindings
        source = self.link.source
        if self.link.state == RUNNING and source is not None and (self._syncing is None or self._syncing.done()):
            self._syncing = asyncio.get_running_loop().create_task(self._sync(source))

    async def _sync(self, source: ShovelSource) -> None:
        try:
            await self._bind_all(source)
        except EndpointFailure as exc:
            self._session_broken(exc)

    def _session_broken(self, failure: EndpointFailure) -> None:
        """Binding or pausing failed: the session is broken, start it again."""
        log.warning("federation link %s: %s", printable(self.link.name), printable(str(failure)))
        self.link.restart()

    async def _bind_all(self, source: ShovelSource) -> None:
        while self._bound != self.bindings:
            wanted = set(self.bindings)
            for key, arguments in sorted(wanted - self._bound):
                await source.bind(key, dict(arguments))
            for key, arguments in sorted(self._bound - wanted):
                await source.unbind(key, dict(arguments))
            self._bound = wanted

    # ---- queue federation: pull only for ready consumers ------------------------------------

    async def _follow_consumers(self) -> None:
        while True:
            await asyncio.sleep(CONSUMER_CHECK_INTERVAL)
            source = self.link.source
            if source is None or self.link.state != RUNNING:
                continue
            wanted = self._vhost.wants_messages(self.federated.name)
            try:
                if wanted and self._paused:
                    await _maybe(source.resume())
                elif not wanted and not self._paused:
                    await _maybe(source.pause())
            except EndpointFailure as exc:
                self._session_broken(exc)
                continue
            self._paused = not wanted

    def status(self, node: str) -> dict[str, Any]:
        """RabbitMQ's /api/federation-links row."""
        federated, link = self.federated, self.link
        row: dict[str, Any] = {
            "node": node,
            federated.kind: federated.name,
            f"upstream_{federated.kind}": self.upstream_name,
            "type": federated.kind,
            "vhost": self._vhost.name,
            "upstream": self.upstream.name,
            "id": self.id,
            "status": link.state,
            "uri": without_credentials(link.source.settings.uri if link.source else self.uri),
            "timestamp": link.timestamp,
            "forwarded": link.counters.forwarded,
        }
        if link.reason:
            row["error"] = link.reason
        return row


async def _maybe(result: Any) -> None:
    if result is not None:
        await result


def binding_keys(exchange: Exchange) -> set[BindingKey]:
    return {(binding.routing_key, tuple(sorted(binding.arguments.items()))) for binding in exchange.table.bindings()}


class VHostFederation:
    def __init__(
        self,
        name: str,
        downstream_id: str,
        endpoints: EndpointClasses,
        local: Callable[[], LocalBroker],
        parameters: Callable[[], Mapping[tuple[str, str], Any]],
        exchanges: Mapping[str, Exchange],
        queues: Mapping[str, Queue],
    ) -> None:
        self.name = name
        self.downstream_id = downstream_id  # names this broker's queues on upstreams
        self.endpoints = endpoints
        self.local = local
        self._parameters = parameters  # the vhost's, read when needed: a change replaces the mapping
        self._exchanges = exchanges
        self._queues = queues
        self.definitions: dict[tuple[str, str], Mapping[str, Any]] = {}  # federated object -> its policy keys
        self.links: dict[Federated, FederationLink] = {}
        self._stopping = BackgroundStops()
        self.running = False

    def wants_messages(self, queue_name: str) -> bool:
        queue = self._queues.get(queue_name)
        if queue is None or queue.message_count:
            return False
        return any(consumer.can_take() for consumer in queue.consumers)

    # ---- what changes which links run -------------------------------------------------------

    def policy_applied(self, kind: str, name: str, definition: Mapping[str, Any]) -> None:
        """A policy (or none) now applies to that exchange or queue."""
        keys = {key: definition[key] for key in ("federation-upstream", "federation-upstream-set") if key in definition}
        if keys == self.definitions.get((kind, name), {}):
            return
        if keys:
            self.definitions[(kind, name)] = keys
        else:
            self.definitions.pop((kind, name), None)
        self._reconcile(kind, name)

    def forget(self, kind: str, name: str) -> None:
        """The exchange or queue is gone."""
        if self.definitions.pop((kind, name), None) is not None:
            self._reconcile(kind, name)

    def upstreams_changed(self) -> None:
        for kind, name in list(self.definitions):
            self._reconcile(kind, name)

    def exchange_bindings_changed(self, exchange: Exchange) -> None:
        if (EXCHANGE, exchange.name) not in self.definitions:
            return
        keys = binding_keys(exchange)
        for federated, link in self.links.items():
            if federated.kind == EXCHANGE and federated.name == exchange.name:
                link.bindings_changed(keys)

    def _reconcile(self, kind: str, name: str) -> None:
        """Stop the links the object no longer needs, start those it now needs."""
        wanted: dict[Federated, Upstream] = {}
        definition = self.definitions.get((kind, name))
        if definition is not None:
            for upstream_name, value in upstreams_for(definition, self._parameters()):
                try:
                    wanted[Federated(kind, name, upstream_name)] = parse_upstream(
                        upstream_name, value, self.endpoints.sources
                    )
                except PolicyError as exc:
                    log.error(
                        "federation upstream '%s' cannot run: %s",
                        printable(upstream_name),
                        printable(reasons_line(exc)),
                    )
        for federated in [f for f in self.links if f.kind == kind and f.name == name]:
            link = self.links[federated]
            if wanted.get(federated) != link.upstream:
                self._stopping.start(self.links.pop(federated).stop())
        if wanted and "amqp" not in self.endpoints.destinations:
            log.error("federation of %s '%s' needs the amqp shovel destination", kind, printable(name))
            return
        for federated, upstream in wanted.items():
            if federated not in self.links:
                self._add(federated, upstream)

    def _add(self, federated: Federated, upstream: Upstream) -> None:
        link = FederationLink(federated, upstream, self)
        if federated.kind == EXCHANGE:
            exchange = self._exchanges.get(federated.name)
            link.bindings = binding_keys(exchange) if exchange is not None else set()
        self.links[federated] = link
        if self.running:
            link.start()

    # ---- the broker's lifecycle --------------------------------------------------------------

    def start(self) -> None:
        self.running = True
        for link in self.links.values():
            link.start()

    async def stop(self) -> None:
        self.running = False
        links = list(self.links.values())
        await asyncio.gather(*(link.stop() for link in links), self._stopping.wait())

    def status(self, node: str) -> list[dict[str, Any]]:
        return [link.status(node) for link in self.links.values()]

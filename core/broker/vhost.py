"""A virtual host: its exchanges, queues and bindings, their rules and their persistence."""

from __future__ import annotations

import logging
import shutil
import uuid
from collections.abc import Collection, Set
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias

from lavin.api import errors
from lavin.api.arguments import InvalidArgument
from lavin.api.message import Message
from lavin.api.printable import printable
from lavin.api.queue import QueueType, StreamType
from lavin.broker.links.vhost_links import VHostLinks
from lavin.broker.policy.arguments import (
    QueueSettings,
    check_durable_declaration,
    check_exchange_equivalence,
    check_queue_equivalence,
    parse_queue_settings,
    queue_type_name,
)
from lavin.broker.policy.policies import VHostPolicies
from lavin.broker.queues.flow import PublisherFlow
from lavin.broker.queues.queue import BEHIND, STORED, MessageQueue, Queue, QueueDeclaration
from lavin.broker.queues.stream_info import stream_info_reply
from lavin.broker.queues.stream_queue import StreamQueue, check_stream_declaration
from lavin.broker.routing.dead_letter import dead_letter
from lavin.broker.routing.default_exchange import DefaultExchangeTable
from lavin.broker.routing.exchange import Exchange, Target
from lavin.broker.routing.host import ExchangeHost
from lavin.broker.runtime.counters import AT_MOST_ONCE, DISABLED
from lavin.broker.runtime.recovery_log import RecoveryLog
from lavin.storage import changes, queue_directories
from lavin.storage.metadata.access_files import vhost_directory_name
from lavin.storage.metadata.definitions_store import (
    DEFINITIONS_FILE,
    BindingDef,
    DefinitionsStore,
    ExchangeDef,
    QueueDef,
    check_definition,
)
from lavin.storage.metadata.storable import UnstorableValue

if TYPE_CHECKING:
    from lavin.broker.broker import Broker, ClientConnection

log = logging.getLogger(__name__)

DEFAULT_EXCHANGES = (
    ("amq.direct", "direct"),
    ("amq.fanout", "fanout"),
    ("amq.topic", "topic"),
    ("amq.headers", "headers"),
    ("amq.match", "headers"),
)

Destination: TypeAlias = Queue | Exchange

# VHost.publish results beyond Queue.publish's: nothing took the message.
UNROUTED: Final = 8


class VHost(ExchangeHost):
    """A vhost of `broker`; the host its queues and exchanges see through the ports it
    subclasses (`QueueHost`, `ExchangeHost`)."""

    def __init__(self, broker: Broker, name: str) -> None:
        self.broker = broker
        self.name = name
        self.loop = broker.loop
        self.group_commit = broker.group_commit
        self.storage = broker.storage
        self.exchanges: dict[str, Exchange] = {}
        self.queues: dict[str, Queue] = {}
        # The exchanges with a binding to each queue or exchange that has one, so that a
        # queue or exchange that goes is unbound without a walk over every exchange.
        self._sources: dict[Destination, set[Exchange]] = {}
        self.data_dir: Path = broker.config.data_dir / vhost_directory_name(name)
        self.transient_dir = self.data_dir / "transient"
        self.definitions: DefinitionsStore | None = None
        # The connections that opened this vhost, and its limits (RabbitMQ's vhost limits;
        # negative: none).
        self.connections: set[ClientConnection] = set()
        self.max_connections = -1
        self.max_queues = -1
        self.policies = VHostPolicies(name, self.data_dir, self.queues, self.exchanges)
        self.links = VHostLinks(
            self.policies,
            broker.downstream_id,
            broker.shovel_endpoints,
            broker.local_connections,
            self.exchanges,
            self.queues,
        )
        # The default exchange exists for passive declares and statistics; routing to it is
        # special-cased.
        self.default_exchange = Exchange(
            self,
            "",
            "direct",
            DefaultExchangeTable(self.queues),
            durable=True,
            auto_delete=False,
            internal=False,
            arguments={},
        )

    # ---- start and stop ------------------------------------------------------------------

    def start(self) -> None:
        """Create the built-in exchanges and recover durable definitions."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        changes.write_whole(self.data_dir / ".vhost", self.name.encode())
        shutil.rmtree(self.transient_dir, ignore_errors=True)  # not replicated: no report
        self.policies.load()  # before any queue or exchange, which it may apply to
        self.exchanges[""] = self.default_exchange
        for name, type_name in DEFAULT_EXCHANGES:
            self._create_exchange(name, type_name, durable=True, auto_delete=False, internal=False, arguments={})
        self.definitions = DefinitionsStore(self.data_dir / DEFINITIONS_FILE)
        saved = self.definitions.load()
        queue_directories.settle(self.data_dir, saved.queues, self.name)
        for exchange_def in saved.exchanges.values():
            self._recover(
                "exchange",
                exchange_def.name,
                lambda d=exchange_def: self._create_exchange(
                    d.name,
                    d.type,
                    durable=True,
                    auto_delete=d.auto_delete,
                    internal=d.internal,
                    arguments=dict(d.arguments),
                ),
            )
        recovery = RecoveryLog(self.name, len(saved.queues))
        for queue_def in saved.queues.values():
            self._recover(
                "queue",
                queue_def.name,
                lambda d=queue_def: self._create_queue(
                    d.name,
                    durable=True,
                    owner=None,
                    auto_delete=d.auto_delete,
                    arguments=dict(d.arguments),
                ),
            )
            recovered = self.queues.get(queue_def.name)
            recovery.queue_recovered(None if recovered is None else recovered.message_count)
        for binding in saved.bindings:
            self._recover("binding", binding.source, lambda b=binding: self._recover_binding(b))
        recovery.finished()

    def _recover(self, kind: str, name: str, create: Any) -> None:
        try:
            create()
        except (errors.AMQPError, OSError, ValueError) as exc:
            log.error(
                "vhost %s: could not recover %s '%s': %s", printable(self.name), kind, printable(name), printable(exc)
            )

    def _recover_binding(self, binding: BindingDef) -> None:
        source = self.exchanges.get(binding.source)
        destination: Destination | None = (
            self.queues.get(binding.destination)
            if binding.destination_type == "queue"
            else self.exchanges.get(binding.destination)
        )
        if source is None or destination is None:
            raise errors.NotFound(f"binding {binding.source} -> {binding.destination} lost an end")
        self._bind(source, destination, binding.routing_key, dict(binding.arguments), persist=False)

    def set_limits(self, max_connections: int, max_queues: int) -> None:
        self.max_connections = max_connections
        self.max_queues = max_queues

    def close(self) -> None:
        for exchange in self.exchanges.values():
            exchange.close()
        for queue in list(self.queues.values()):
            if queue.persistent:
                queue.close()
            else:
                queue.delete()
        if self.definitions is not None:
            self.definitions.close()

    def delete(self) -> None:
        """The vhost is deleted: its queues and the messages its exchanges hold go. Its
        connections are closed already; the caller removes the data dir."""
        for exchange in self.exchanges.values():
            exchange.delete()
        for queue in self.queues.values():
            queue.delete()
        self.exchanges.clear()
        self.queues.clear()
        self._sources.clear()
        if self.definitions is not None:
            self.definitions.close()

    # ---- connections ---------------------------------------------------------------------

    def check_connection_limit(self, user_name: str) -> None:
        """530 with RabbitMQ's text when `max-connections` connections have it open."""
        if 0 <= self.max_connections <= len(self.connections):
            raise errors.NotAllowed(
                f"access to vhost '{self.name}' refused for user '{user_name}': "
                f"connection limit ({self.max_connections}) is reached",
                10,
                40,
            )

    def connection_opened(self, connection: ClientConnection) -> None:
        self.connections.add(connection)

    def connection_closed(self, connection: ClientConnection) -> None:
        """Exclusive queues go with the connection that declared them."""
        self.connections.discard(connection)
        for queue in [q for q in self.queues.values() if q.exclusive_owner is connection]:
            self.delete_queue(queue)

    def _changed(self, kind: str, name: str, action: str) -> None:
        federation = self.links.federation
        if kind == "binding" and (source := self.exchanges.get(name)) is not None:
            federation.exchange_bindings_changed(source)
        elif action == "deleted":
            federation.forget(kind, name)
        hook = self.broker.registry.hooks.lavin_definitions_changed
        if hook.get_hookimpls():  # a hook call costs microseconds even with no plugin
            hook(vhost=self, kind=kind, name=name, action=action)

    # ---- exchanges -----------------------------------------------------------------------

    def get_exchange(self, name: str) -> Exchange:
        exchange = self.exchanges.get(name)
        if exchange is None:
            raise errors.NotFound(f"no exchange '{name}' in vhost '{self.name}'")
        return exchange

    def declare_exchange(
        self,
        name: str,
        type_name: str,
        *,
        passive: bool,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: dict[str, Any],
    ) -> Exchange:
        check_not_default_exchange(name)  # passive too, as RabbitMQ
        if passive:
            return self.get_exchange(name)
        existing = self.exchanges.get(name)
        if existing is not None:
            check_exchange_equivalence(existing, self.name, type_name, durable, auto_delete, internal, arguments)
            return existing
        if name.startswith("amq."):
            raise errors.AccessRefused(f"exchange name '{name}' contains reserved prefix 'amq.*'")
        definition = ExchangeDef(name, type_name, auto_delete, internal, arguments)
        check_storable(definition)
        exchange = self._create_exchange(
            name, type_name, durable=durable, auto_delete=auto_delete, internal=internal, arguments=arguments
        )
        if durable and self.definitions is not None:
            try:
                self.definitions.exchange_declared(definition)
            except OSError:  # not written: the exchange never was (no await since it was created)
                del self.exchanges[name]
                exchange.delete()
                raise
        self._changed("exchange", name, "declared")
        return exchange

    def _create_exchange(
        self, name: str, type_name: str, *, durable: bool, auto_delete: bool, internal: bool, arguments: dict[str, Any]
    ) -> Exchange:
        exchange_type = self.broker.registry.exchange_types.get(type_name)
        if exchange_type is None:
            raise errors.CommandInvalid(f"invalid exchange type '{type_name}'")
        table = exchange_type.create(arguments, self.broker.registry.exchange_types)
        exchange = Exchange(
            self,
            name,
            type_name,
            table,
            durable=durable,
            auto_delete=auto_delete,
            internal=internal,
            arguments=arguments,
        )
        self.exchanges[name] = exchange
        if self.policies.applies_at_declare():
            self.policies.apply_to_exchange(exchange)
        return exchange

    def check_exchange_deletable(self, name: str) -> None:
        """403 for the default exchange and the amq.* ones: they are the broker's."""
        check_not_default_exchange(name)
        if name.startswith("amq."):
            raise errors.AccessRefused(f"deletion of system exchange '{name}' in vhost '{self.name}' not allowed")

    def delete_exchange(self, name: str, *, if_unused: bool) -> None:
        self.check_exchange_deletable(name)
        exchange = self.exchanges.get(name)
        if exchange is None:
            return  # RabbitMQ answers delete-ok for a missing exchange
        if if_unused and (exchange.has_bindings() or exchange in self._sources):
            raise errors.PreconditionFailed(f"exchange '{name}' in vhost '{self.name}' in use")
        self._remove_exchange(exchange)

    def _remove_exchange(self, exchange: Exchange) -> None:
        del self.exchanges[exchange.name]
        exchange.delete()
        for binding in list(exchange.table.bindings()):
            destination = binding.destination
            if isinstance(destination, (Queue, Exchange)):
                self._discard_source(destination, exchange)
        self._unbind_from_sources(exchange)
        if exchange.durable and self.definitions is not None:
            self.definitions.exchange_deleted(exchange.name)
        self._changed("exchange", exchange.name, "deleted")

    def _unbind_from_sources(self, destination: Destination) -> None:
        """A queue or exchange goes: every binding to it goes, a federated source's upstream
        follows, and an auto-delete source left unbound goes too."""
        for source in self._sources.pop(destination, ()):
            source.table.remove_destination(destination)
            self.links.federation.exchange_bindings_changed(source)
            self._auto_delete_if_unbound(source)

    def _auto_delete_if_unbound(self, exchange: Exchange) -> None:
        if exchange.auto_delete and exchange.name in self.exchanges and not exchange.has_bindings():
            self._remove_exchange(exchange)

    # ---- queues --------------------------------------------------------------------------

    def get_queue(self, name: str, connection: object | None = None) -> Queue:
        queue = self.queues.get(name)
        if queue is None:
            raise errors.NotFound(f"no queue '{name}' in vhost '{self.name}'")
        if connection is not None:
            self.check_exclusive(queue, connection)
        return queue

    def check_exclusive(self, queue: Queue, connection: object, exclusive: bool | None = None) -> None:
        """405 unless this connection may use the queue (and, on redeclare, asks for the same exclusivity)."""
        foreign = queue.exclusive_owner is not None and queue.exclusive_owner is not connection
        if foreign or (exclusive is not None and exclusive != (queue.exclusive_owner is not None)):
            raise errors.ResourceLocked(
                f"cannot obtain exclusive access to locked queue '{queue.name}' in vhost '{self.name}'. "
                "It could be originally declared on another connection or the exclusive property "
                "value does not match that of the original declaration."
            )

    def declare_queue(
        self,
        name: str,
        connection: object,
        *,
        passive: bool,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
        arguments: dict[str, Any],
    ) -> Queue:
        """`name` is a client's that passed `check_queue_name`, or one from `new_queue_name`."""
        if passive:
            return self.get_queue(name, connection)
        counters = self.broker.stats.counters
        counters.queues_declared += 1
        existing = self.queues.get(name)
        if existing is not None:
            self.check_exclusive(existing, connection, exclusive)
            check_queue_equivalence(existing, self.name, durable, exclusive, auto_delete, arguments)
            existing.touch()
            return existing
        # Counted only under a limit: a declare without one pays nothing for them.
        if self.max_queues >= 0:
            check_queue_limit(name, self.max_queues, len(self.queues), f"vhost '{self.name}'")
        if cluster_limit := self.broker.config.max_queues:
            queues = sum(len(vhost.queues) for vhost in self.broker.vhosts.values())
            check_queue_limit(name, cluster_limit, queues, "cluster")
        definition = QueueDef(name, auto_delete, arguments)
        check_storable(definition)
        queue = self._create_queue(
            name,
            durable=durable,
            owner=connection if exclusive else None,
            auto_delete=auto_delete,
            arguments=arguments,
        )
        if durable and not exclusive and self.definitions is not None:
            try:
                self.definitions.queue_declared(definition)
            except OSError:  # not written: the queue never was (no await since it was created)
                del self.queues[name]
                queue.delete()
                raise
        counters.queues_created += 1
        self._changed("queue", name, "declared")
        return queue

    def _create_queue(
        self, name: str, *, durable: bool, owner: object | None, auto_delete: bool, arguments: dict[str, Any]
    ) -> Queue:
        """A queue of the type its arguments select; `owner` is the connection of an exclusive one."""
        type_name = queue_type_name(arguments)
        queue_type = self.broker.registry.queue_types.get(type_name)
        if queue_type is None:
            raise errors.PreconditionFailed(f"unknown queue type '{type_name}' for queue '{name}'")
        is_stream = issubclass(queue_type, StreamType)
        if is_stream:
            check_stream_declaration(
                name,
                self.name,
                durable=durable,
                exclusive=owner is not None,
                auto_delete=auto_delete,
                arguments=arguments,
            )
            settings = QueueSettings()  # a stream's limits are retention, which its store applies
        else:
            if queue_type.durable_only:
                check_durable_declaration(
                    name, self.name, durable=durable, exclusive=owner is not None, auto_delete=auto_delete
                )
            settings = parse_queue_settings(name, self.name, arguments)
        persistent = durable and owner is None
        parent = self.data_dir if persistent else self.transient_dir
        path = queue_directories.queue_directory(parent, name)
        try:
            store = queue_type.create(path, arguments, persistent, self.storage)
        except InvalidArgument as exc:
            raise errors.PreconditionFailed(
                f"invalid arg '{exc.argument}' for queue '{name}' in vhost '{self.name}': {exc.reason}"
            ) from None
        if persistent:
            changes.write_whole(path / queue_directories.NAME_FILE, name.encode())
        declaration = QueueDeclaration(name, durable, owner, auto_delete, arguments)
        queue: Queue
        if isinstance(store, StreamType):
            queue = StreamQueue(self, declaration, settings, store)
        elif isinstance(store, QueueType) and not is_stream:
            queue = MessageQueue(self, declaration, settings, store)
        else:
            store.delete()
            log.error("queue type '%s' built a %s, which is not of its kind", type_name, type(store).__name__)
            raise errors.PreconditionFailed(f"queue type '{type_name}' failed to create queue '{name}'")
        self.queues[name] = queue
        if self.policies.applies_at_declare():
            self.policies.apply_to_queue(queue)
        return queue

    def delete_queue(self, queue: Queue) -> int:
        """Remove a queue, cancel its consumers and drop its data; returns its message count."""
        if self.queues.get(queue.name) != queue:  # gone already, or a newer queue of that name
            return 0
        count = queue.message_count
        del self.queues[queue.name]
        queue.deleted = True  # no deliveries or drains from here on
        for consumer in list(queue.consumers):
            consumer.cancelled_by_broker()
        queue.consumers.clear()
        self._unbind_from_sources(queue)
        if queue.persistent and self.definitions is not None:
            # Whole or gone after a crash, never in part: see lavin.storage.queue_directories.
            aside = queue_directories.begin_delete(queue_directories.queue_directory(self.data_dir, queue.name))
            queue.delete()
            self.definitions.queue_deleted(queue.name)
            queue_directories.finish_delete(aside)
        else:
            queue.delete()
        self.broker.stats.counters.queues_deleted += 1
        self._changed("queue", queue.name, "deleted")
        return count

    def dead_letter(self, queue: Queue, message: Message, reason: str) -> None:
        self.dropped(queue, reason)
        dead_letter(self.exchanges, queue, message, reason)

    def dropped(self, queue: Queue, reason: str) -> None:
        """Count a message that died, as RabbitMQ's dead-lettered counters: by queue type,
        whether it had an existing dead-letter exchange to go to, and why it died."""
        exchange = queue.settings.dead_letter_exchange
        strategy = AT_MOST_ONCE if exchange is not None and exchange in self.exchanges else DISABLED
        self.broker.stats.counters.dead_lettered[(queue_type_name(queue.arguments), strategy, reason)] += 1

    # ---- bindings ------------------------------------------------------------------------

    def bind(self, source: Exchange, destination: Destination, routing_key: str, arguments: dict[str, Any]) -> None:
        check_not_default_exchange(source.name)
        check_not_default_exchange(destination.name)
        self._bind(source, destination, routing_key, arguments, persist=True)

    def _bind(
        self,
        source: Exchange,
        destination: Destination,
        routing_key: str,
        arguments: dict[str, Any],
        *,
        persist: bool,
    ) -> None:
        definition = self._binding_def(source, destination, routing_key, arguments)
        if persist:
            check_storable(definition)
        if not source.table.bind(destination, routing_key, arguments):
            return
        newly_a_source = source not in self._sources.get(destination, ())
        self._sources.setdefault(destination, set()).add(source)
        if persist and self._binding_is_durable(source, destination) and self.definitions is not None:
            try:
                self.definitions.bound(definition)
            except OSError:  # not written: the binding never was
                source.table.unbind(destination, routing_key, arguments)
                if newly_a_source:
                    self._discard_source(destination, source)
                raise
        if persist:
            self._changed("binding", source.name, "declared")

    def unbind(self, source: Exchange, destination: Destination, routing_key: str, arguments: dict[str, Any]) -> None:
        check_not_default_exchange(source.name)
        check_not_default_exchange(destination.name)
        if not source.table.unbind(destination, routing_key, arguments):
            return
        if not source.table.is_bound(destination):
            self._discard_source(destination, source)
        if self._binding_is_durable(source, destination) and self.definitions is not None:
            self.definitions.unbound(self._binding_def(source, destination, routing_key, arguments))
        self._changed("binding", source.name, "deleted")
        self._auto_delete_if_unbound(source)

    def sources_of(self, destination: Destination) -> Set[Exchange]:
        """The exchanges with a binding to `destination` (the default exchange aside)."""
        return self._sources.get(destination, frozenset())

    def _discard_source(self, destination: Destination, source: Exchange) -> None:
        sources = self._sources.get(destination)
        if sources is not None:
            sources.discard(source)
            if not sources:
                del self._sources[destination]

    @staticmethod
    def _binding_is_durable(source: Exchange, destination: Destination) -> bool:
        if not source.durable:
            return False
        if isinstance(destination, Queue):
            return destination.persistent
        return destination.durable

    @staticmethod
    def _binding_def(
        source: Exchange, destination: Destination, routing_key: str, arguments: dict[str, Any]
    ) -> BindingDef:
        kind: Literal["queue", "exchange"] = "queue" if isinstance(destination, Queue) else "exchange"
        return BindingDef(source.name, destination.name, kind, routing_key, arguments)

    # ---- publishing ----------------------------------------------------------------------

    def publish(self, exchange_name: str, message: Message, publisher: PublisherFlow | None) -> int:
        """Route a message and store it wherever it goes: Queue.publish's result for all of
        its queues or-ed together, with UNROUTED when nothing took it. A queue whose
        consumers fall behind slows `publisher` down. Raises 404/403 for a missing or
        internal exchange, before anything is stored. The properties were checked when the
        message was published (`check_properties`), so routing can decode them."""
        targets = self.route(exchange_name, message)
        status = STORED
        for target in targets:
            result = target.publish(message)
            if result & BEHIND and publisher is not None and isinstance(target, Queue):
                publisher.slow_down(target)
            status |= result
        if not targets and not (exchange_name == "" and self._publish_to_pseudo_queue(message)):
            status |= UNROUTED
        return status

    def _publish_to_pseudo_queue(self, message: Message) -> bool:
        """An unroutable message on the default exchange: a reply to a direct reply-to
        address, or a stream-info request, which is answered here."""
        replies = self.broker.replies
        if replies.deliver(message):
            return True
        reply = stream_info_reply(self.queues, self.name, message)
        if reply is None:
            return False
        targets = self.route("", reply)
        for target in targets:
            target.publish(reply)
        if not targets:
            replies.deliver(reply)
        return True

    def route(self, exchange_name: str, message: Message) -> Collection[Target]:
        """Where a message goes; raises 404/403 for a missing or internal exchange."""
        if exchange_name == "" and (len(message.properties) < 2 or not message.properties[0] & 0x20):
            # The common case, without headers and so without CC or BCC, skips the walk.
            queue = self.queues.get(message.routing_key)
            default = self.default_exchange
            default.published_in += 1
            if queue is None:
                return ()
            default.published_out += 1
            return (queue,)
        exchange = self.publishable_exchange(exchange_name)
        targets = exchange.publish_targets(message)
        exchange.published_in += 1
        exchange.published_out += len(targets)
        return targets

    def publishable_exchange(self, name: str) -> Exchange:
        """The exchange a client may publish to; 404 when missing, 403 when internal."""
        exchange = self.exchanges.get(name)
        if exchange is None:
            raise errors.NotFound(f"no exchange '{name}' in vhost '{self.name}'")
        if exchange.internal:
            raise errors.AccessRefused(f"cannot publish to internal exchange '{name}' in vhost '{self.name}'")
        return exchange


def check_queue_limit(name: str, limit: int, count: int, scope: str) -> None:
    """406 with RabbitMQ's text when `count` queues fill `limit` (negative: no limit),
    checked before a new queue is declared. `scope` names the limit: "cluster" for the
    broker's `max_queues` (RabbitMQ's cluster_queue_limit), "vhost '<name>'" for a vhost's."""
    if 0 <= limit <= count:
        raise errors.PreconditionFailed(f"cannot declare queue '{name}': queue limit in {scope} ({limit}) is reached")


def new_queue_name() -> str:
    """The name of a server-named queue, as RabbitMQ makes them."""
    return f"amq.gen-{uuid.uuid4().hex[:22]}"


def check_queue_name(name: str) -> None:
    """403 for a queue name a client may not choose: the amq. prefix is the server's."""
    if name.startswith("amq."):
        raise errors.AccessRefused(f"queue name '{name}' contains reserved prefix 'amq.*'")


def check_storable(definition: ExchangeDef | QueueDef | BindingDef) -> None:
    """406 naming what the definitions log could not hold, before anything is created. Over
    AMQP the codec has bounded the arguments already; definitions from the API, an import or
    a definitions file arrive here unchecked."""
    try:
        check_definition(definition)
    except UnstorableValue as exc:
        raise errors.PreconditionFailed(str(exc)) from None


def check_not_default_exchange(name: str) -> None:
    """403 for any declare, delete or binding that names the default exchange."""
    if name == "":
        raise errors.AccessRefused("operation not permitted on the default exchange")

"""The broker process: logging, event loop, data-dir lock, listener, signals, shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import gc
import logging
import os
import resource
import signal
import stat
import sys
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lavin.broker.broker import Broker
from lavin.broker.runtime.allocator import tune_allocator
from lavin.broker.runtime.cluster_status import ClusterStatusSource
from lavin.broker.runtime.group_commit import ReplicationBarrier
from lavin.config import Config, StartupError
from lavin.listeners.amqp import AmqpListeners
from lavin.listeners.direct import DirectConnections
from lavin.listeners.management_plane import ManagementPlane
from lavin.listeners.prebound import PreboundSockets
from lavin.management.definitions.importer import load_definitions_file
from lavin.management.recent_log import RECENT_LOG
from lavin.plugin_registry import Registry, load_registry
from lavin.readiness import notify_systemd, remove_ready_file, write_ready_file
from lavin.transport.tls import TlsCertificates, TlsSetupError

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# Connections are closed by broker.shutdown(); this only bounds a stuck transport.
LISTENER_CLOSE_TIMEOUT = 5.0
GC_YOUNG_THRESHOLD = 50_000  # allocations between young collections (Python's default: 700)
LOW_OPEN_FILE_LIMIT = 1024  # below it, a few hundred clients or a long queue run out of descriptors


# What runs in the process's event loop: a broker on its own, or a cluster node.
ProcessMain = Callable[[Config, Registry, Path | None], Coroutine[Any, Any, None]]


def serve(config: Config, ready_file: Path | None = None, main: ProcessMain | None = None) -> None:
    """Run the broker (or `main`, a cluster node) until SIGTERM or SIGINT, then shut down
    gracefully.

    Once it listens, `ready_file` (if given) gets the ports it bound and systemd is told.
    """
    configure_logging(config.log_level)
    raise_open_file_limit()
    tune_allocator()
    loop_factory = event_loop_factory(config.loop)
    apply_umask(int(config.umask, 8), config.data_dir)
    with data_dir_lock(config.data_dir):
        registry = load_plugins(config)
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run((main or run_broker)(config, registry, ready_file))
    log.info("Stopped")


def load_plugins(config: Config) -> Registry:
    """The built-in and the enabled plugins, configured; each named in the log."""
    registry = load_registry(
        config.plugins,
        plugin_settings=config.plugin_settings,
        auth_backends=config.auth_backends,
    )
    for line in registry.startup_report():
        log.info("%s", line)
    return registry


def plugins_summary(registry: Registry) -> str:
    """What runs, in a sentence: the built-in plugins are always there, the others only
    when enabled (a bare "0 plugins started" read as if nothing ran)."""
    built_in = sum(plugin.state == "built-in" for plugin in registry.loaded)
    # A name enables its entry point in every group (a shovel source and destination): once here.
    enabled = list(dict.fromkeys(plugin.name for plugin in registry.loaded if plugin.state == "enabled"))
    loaded = f"{built_in} built-in plugins loaded"
    if not enabled:
        return f"{loaded}, no optional plugin enabled (see `lavin plugins`)"
    return f"{loaded}; enabled: {', '.join(enabled)}"


def raise_open_file_limit() -> None:
    """Every connection and every queue holding messages needs file descriptors: take all
    the system allows this process, as brokers usually do."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:  # an unlimited hard limit may still be refused
            log.warning("could not raise the open file limit from %s: %s", soft, exc)
    if soft != resource.RLIM_INFINITY and soft < LOW_OPEN_FILE_LIMIT:
        log.warning(
            "Open file limit %s is low: every connection and every open queue file takes a descriptor; "
            "raise it to at least %s (ulimit -n, or LimitNOFILE= in the systemd unit)",
            soft,
            LOW_OPEN_FILE_LIMIT,
        )
    else:
        log.info("Open file limit: %s", soft)


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,
    )
    # Also kept in memory, for `lavin ctl log_tail`.
    RECENT_LOG.setFormatter(logging.getLogger().handlers[0].formatter)
    logging.getLogger().addHandler(RECENT_LOG)


def event_loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The loop factory for asyncio.Runner; None means the default asyncio loop."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise StartupError("--loop uvloop was asked for but uvloop is not installed") from None
        return None
    return uvloop.new_event_loop


def apply_umask(mask: int, data_dir: Path) -> None:
    """Everything the broker creates from now on (the data dir, segments, metadata, sockets)
    follows `mask`. An existing data dir keeps its mode, as its owner chose it, but a warning
    says when other users may enter it while the mask would have kept them out."""
    os.umask(mask)
    try:
        mode = stat.S_IMODE(data_dir.stat().st_mode)
    except OSError:  # not there yet, or unreadable: data_dir_lock says so
        return
    if mode & mask & stat.S_IRWXO:
        log.warning(
            "Data dir %s has mode %04o: other local users can read message bodies; `chmod o-rwx` it (umask is %04o)",
            data_dir,
            mode,
            mask,
        )


@contextmanager
def data_dir_lock(data_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on the data dir: two brokers on one store corrupt it."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise StartupError(f"cannot use data dir {data_dir}: {exc}") from exc
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(descriptor, 32, 0).decode(errors="replace").strip() or "unknown"
            raise StartupError(f"data dir {data_dir} is in use by another broker (pid {holder})") from None
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(descriptor)  # closing releases the flock


def tune_garbage_collector() -> None:
    """Collect cycles less often: the broker allocates a few short-lived objects per message
    and makes almost no cycles, and with many queues each full collection walks them all.
    What exists after recovery (definitions, queues) is frozen out of collections."""
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, 50, 100)


class RunningBroker:
    """A broker that recovered its data and listens; `stop` shuts it down gracefully."""

    def __init__(
        self,
        broker: Broker,
        listeners: AmqpListeners,
        registry: Registry,
        management: ManagementPlane,
        certificates: TlsCertificates | None,
    ) -> None:
        self.broker = broker
        self.listeners = listeners
        self.registry = registry
        self.management = management
        self.certificates = certificates

    @property
    def amqp_port(self) -> int:
        """The port the AMQP listener got (the one configured, or a free one for port 0)."""
        return self.listeners.amqp_port

    def reload_certificates(self) -> None:
        """SIGHUP: new TLS connections get the certificate files as they are now."""
        if self.certificates is None:
            log.info("SIGHUP: no TLS certificates to reload")
            return
        with contextlib.suppress(TlsSetupError):  # logged; the current ones stay
            self.certificates.reload()

    @property
    def http_port(self) -> int | None:
        """The management API's port (the one configured, or a free one for port 0)."""
        http = self.management.http
        return None if http is None else http.port

    async def stop(self) -> None:
        log.info("Shutting down")
        self.registry.hooks.lavin_shutdown(broker=self.broker)
        await self.management.stop()
        self.listeners.close()
        await self.broker.shutdown()
        try:
            await asyncio.wait_for(self.listeners.wait_closed(), LISTENER_CLOSE_TIMEOUT)
        except TimeoutError:
            log.warning("Listener did not close within %s s", LISTENER_CLOSE_TIMEOUT)


@dataclass(frozen=True)
class ClusterAttachments:
    """What a cluster node hands the broker it starts once elected leader."""

    name: str  # the node's name in the cluster
    prebound: PreboundSockets  # its AMQP and HTTP sockets, kept while its role changes
    replication: ReplicationBarrier  # confirms wait for the in-sync followers
    status: ClusterStatusSource


async def start_broker(
    config: Config,
    registry: Registry,
    stop_broker: Callable[[], None] | None = None,
    cluster: ClusterAttachments | None = None,
) -> RunningBroker:
    """Recover the data, import `load_definitions`, open the management plane and the
    AMQP listener, and run the start-up hooks. `stop_broker` is what `lavin ctl stop` calls;
    `cluster` is given by a cluster node that was elected leader."""
    loop = asyncio.get_running_loop()
    log.info("Lavin starting, data dir %s, event loop %s", config.data_dir, type(loop).__module__)
    certificates = load_certificates(config)
    broker = Broker(config, registry)
    prebound = None
    if cluster is not None:  # before anything is published
        broker.alarms.node = cluster.name
        broker.group_commit.replication = cluster.replication
        broker.cluster = cluster.status
        prebound = cluster.prebound
    await broker.start()
    listeners = AmqpListeners(broker, config, certificates, prebound)
    management = ManagementPlane(
        broker,
        config,
        certificates=certificates,
        amqp_connection=listeners.connection,
        stop_broker=stop_broker,
        prebound=prebound,
    )
    try:
        if config.load_definitions is not None:
            load_definitions_file(broker, config.load_definitions)
        await management.start()
    except StartupError:
        await broker.shutdown()
        raise
    tune_garbage_collector()
    try:
        await listeners.start()
    except StartupError:
        await management.stop()
        await broker.shutdown()
        raise
    http = management.http
    if http is not None:
        for scheme, maybe_port in (("http", http.port), ("https", http.tls_port)):
            if maybe_port is not None:
                broker.listeners.append((scheme, http.bind, maybe_port))
    metrics = management.metrics
    if metrics is not None and metrics.port is not None:  # RabbitMQ's name for the prometheus listener
        broker.listeners.append(("http/prometheus", metrics.bind, metrics.port))
    broker.start_links(DirectConnections(broker))
    registry.hooks.lavin_startup(broker=broker)
    log.info("Server startup complete; %s", plugins_summary(registry))
    return RunningBroker(broker, listeners, registry, management, certificates)


def load_certificates(config: Config) -> TlsCertificates | None:
    """The TLS certificates the AMQPS and HTTPS listeners use; None without tls_cert."""
    if config.tls_cert is None:
        return None
    try:
        return TlsCertificates(config)
    except TlsSetupError as exc:
        raise StartupError(f"TLS settings not usable: {exc}") from None


async def run_broker(config: Config, registry: Registry, ready_file: Path | None = None) -> None:
    loop = asyncio.get_running_loop()
    stop_requested = asyncio.Event()
    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, stop_requested.set)
    running = await start_broker(config, registry, stop_requested.set)
    loop.add_signal_handler(signal.SIGHUP, running.reload_certificates)
    if ready_file is not None:
        write_ready_file(ready_file, running.broker.listeners)
    notify_systemd("READY=1")
    await stop_requested.wait()
    notify_systemd("STOPPING=1")
    if ready_file is not None:
        remove_ready_file(ready_file)
    # A second signal now takes the default action, so a stuck shutdown can be interrupted.
    for signum in STOP_SIGNALS:
        loop.remove_signal_handler(signum)
    await running.stop()

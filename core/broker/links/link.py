"""One running shovel: open its source and destination, move messages between them under
its ack mode, and start again after `reconnect-delay` when either end fails.

A link is one task on the broker's loop; the endpoints await their I/O, so a link never
blocks the loop. Its state is RabbitMQ's: `starting`, `running`, `terminated` (done, or
failed with a reconnect delay of 0), or `error` with the reason while it waits to start
again; and Lavin's `paused` (LavinMQ's) while an operator holds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar
from urllib.parse import urlsplit, urlunsplit

from lavin.api.printable import printable
from lavin.api.shovel import (
    AckMode,
    EndpointFailure,
    EndpointSettings,
    LocalBroker,
    Settle,
    ShovelDestination,
    ShovelEndpoint,
    ShovelMessage,
    ShovelSource,
)
from lavin.broker.links.definition import ShovelDefinition

log = logging.getLogger(__name__)

STARTING: Final = "starting"
RUNNING: Final = "running"
TERMINATED: Final = "terminated"
ERROR: Final = "error"
PAUSED: Final = "paused"
CLOSE_TIMEOUT: Final = 5.0  # seconds an endpoint gets to close before it is left
E = TypeVar("E", bound=ShovelEndpoint)


class BackgroundStops:
    """Links stopped while the vhost goes on (a parameter changed or cleared): their closes
    run on their own, and the vhost's own stop waits for them."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self, stop: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(stop)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def wait(self) -> None:
        await asyncio.gather(*self._tasks)


@dataclass
class LinkCounters:
    """What the status and Prometheus show of a link, since the broker started."""

    forwarded: int = 0  # messages handed to the destination
    confirmed: int = 0  # of those, confirmed by it (settled at the source in on-confirm)
    failed: int = 0  # confirms that failed; the source message comes again
    starts: int = 0


# What a federation link does to each message before it is sent on: the message to send
# (with its `x-received-from` entry), or None to drop it (a cycle, or too many hops).
Transform = Callable[[ShovelMessage], ShovelMessage | None]
# Called once both ends are open, before the first message moves (a federation link binds
# its upstream queue then).
Opened = Callable[[ShovelSource], Awaitable[None]]


class ShovelLink:
    def __init__(
        self,
        vhost: str,
        definition: ShovelDefinition,
        local: Callable[[], LocalBroker],
        finished: Callable[[ShovelLink], None],
        *,
        transform: Transform | None = None,
        opened: Opened | None = None,
    ) -> None:
        self.vhost = vhost
        self.definition = definition
        self._local = local
        self._finished = finished  # called once the source is done (`src-delete-after`)
        self._transform = transform
        self._opened = opened
        self.state = STARTING
        self.reason = ""
        self.changed_at = time.time()
        self.counters = LinkCounters()
        self.source: ShovelSource | None = None
        self.destination: ShovelDestination | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return self.definition.name

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"shovel {self.name}")

    async def stop(self) -> None:
        """Close both ends and stop; unsettled messages stay at the source."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def pause(self) -> None:
        await self.stop()
        self.hold()

    def hold(self) -> None:
        """Paused without having run: a pause kept across a restart."""
        self._set_state(PAUSED)

    def resume(self) -> None:
        if self.state == PAUSED:
            self._set_state(STARTING)
            self.start()

    def restart(self) -> None:
        """Start again now (RabbitMQ's restart); a paused link stays paused."""
        if self.state != PAUSED and self._task is not None:
            self._task.cancel()
            self._task = None
        if self.state != PAUSED:
            self.start()

    def _set_state(self, state: str, reason: str = "") -> None:
        self.state, self.reason, self.changed_at = state, reason, time.time()

    async def _run(self) -> None:
        while True:
            self._set_state(STARTING)
            self.counters.starts += 1
            try:
                done = await self._session()
            except EndpointFailure as exc:
                self._set_state(ERROR, str(exc))
            except Exception as exc:  # an endpoint's bug costs this link a restart, not the broker
                log.exception("shovel '%s' in vhost '%s' failed", printable(self.name), printable(self.vhost))
                self._set_state(ERROR, f"{type(exc).__name__}: {exc}")
            else:
                if done:
                    self._set_state(TERMINATED)
                    self._finished(self)
                    return
            delay = self.definition.reconnect_delay
            log.warning(
                "shovel '%s' in vhost '%s': %s%s",
                printable(self.name),
                printable(self.vhost),
                printable(self.reason),
                f"; starting again in {delay:g} s" if delay else "; not starting again (reconnect-delay 0)",
            )
            if not delay:
                self._set_state(TERMINATED, self.reason)
                return
            await asyncio.sleep(delay)

    async def _session(self) -> bool:
        """One start: True once the source is done and every message is settled."""
        definition = self.definition
        source_uri = random.choice(definition.source_uris)
        destination_uri = random.choice(definition.destination_uris)
        source = self._endpoint(definition.source_classes, source_uri)
        destination = self._endpoint(definition.destination_classes, destination_uri)
        self.source, self.destination = source, destination
        try:
            await source.open()
            await destination.open()
            if self._opened is not None:
                await self._opened(source)
            self._set_state(RUNNING)
            return await self._move(source, destination)
        finally:
            await _close(destination)
            await _close(source)

    def _endpoint(self, classes: Mapping[str, type[E]], uri: str) -> E:
        settings = EndpointSettings(
            uri=uri,
            definition=self.definition.value,
            vhost=self.vhost,
            link_name=self.name,
            ack_mode=self.definition.ack_mode,
            local=self._local(),
        )
        return classes[urlsplit(uri).scheme.lower()](settings)

    async def _move(self, source: ShovelSource, destination: ShovelDestination) -> bool:
        """Move messages until the source is done; a failed confirm ends the session."""
        loop = asyncio.get_running_loop()
        failure: asyncio.Future[None] = loop.create_future()
        pending: set[asyncio.Future[None]] = set()
        ack_mode = self.definition.ack_mode
        transform = self._transform

        def confirmed(handed_over: asyncio.Future[None], settle: Settle) -> None:
            pending.discard(handed_over)
            error = None if handed_over.cancelled() else handed_over.exception()
            if error is None and not handed_over.cancelled():
                self.counters.confirmed += 1
                if ack_mode is AckMode.ON_CONFIRM:
                    settle(True)
                return
            self.counters.failed += 1
            if ack_mode is AckMode.ON_CONFIRM:
                settle(False)
            if not failure.done():
                failure.set_exception(error if isinstance(error, EndpointFailure) else EndpointFailure(str(error)))

        async def pump() -> None:
            async for received, settle in source.messages():
                message = received if transform is None else transform(received)
                if message is None:  # dropped: as good as handed over
                    settle(True)
                    continue
                handed_over = await destination.send(message)
                self.counters.forwarded += 1
                if ack_mode is AckMode.ON_PUBLISH:
                    settle(True)
                pending.add(handed_over)
                handed_over.add_done_callback(functools.partial(confirmed, settle=settle))
            if pending:
                await asyncio.wait(set(pending))

        pumping = loop.create_task(pump())
        try:
            await asyncio.wait({pumping, failure}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not pumping.done():
                pumping.cancel()
                with contextlib.suppress(asyncio.CancelledError, EndpointFailure):
                    await pumping
            if not failure.done():
                failure.cancel()  # confirms that fail after the session are its close's doing
        if not failure.cancelled():
            failure.result()  # raises the confirm's failure
        pumping.result()  # raises the source's or destination's failure
        return True

    @property
    def timestamp(self) -> str:
        """When the state last changed, as RabbitMQ's status rows print it."""
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.changed_at))

    def status(self, node: str) -> dict[str, Any]:
        """The link as RabbitMQ's /api/shovels shows a dynamic shovel."""
        row: dict[str, Any] = {
            "node": node,
            "timestamp": self.timestamp,
            "name": self.name,
            "vhost": self.vhost,
            "type": "dynamic",
            "state": self.state,
        }
        if self.state == RUNNING and self.source is not None and self.destination is not None:
            row.update(self.source.details())
            row.update(self.destination.details())
            # The URIs as they were set (RabbitMQ shows them so), without their passwords.
            row["src_uri"] = without_credentials(self.source.settings.uri)
            row["dest_uri"] = without_credentials(self.destination.settings.uri)
            row["blocked_status"] = "running"
        if self.reason:
            row["reason"] = self.reason
        row.update(forwarded=self.counters.forwarded, confirmed=self.counters.confirmed)
        return row


def without_credentials(uri: str) -> str:
    """The URI as the status shows it: the password never leaves the broker."""
    parts = urlsplit(uri)
    if parts.password is None:
        return uri
    host = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}@{host}" if user else host))


async def _close(endpoint: ShovelEndpoint) -> None:
    try:
        await asyncio.wait_for(asyncio.shield(endpoint.close()), CLOSE_TIMEOUT)
    except Exception:  # closing must not keep the link from starting again
        log.exception("closing shovel endpoint %s failed", type(endpoint).__name__)

"""Conformance tests for shovel endpoints: subclass `ShovelSourceKit` or
`ShovelDestinationKit` in your test suite.

The kit drives one endpoint the way the core does, on an event loop of its own per check,
against a far side the subclass runs (a broker, a web server, a file): messages come and
arrive in order, a source message that was not settled (or was settled False) comes again
after close and open, a destination's future completes only once the far side has the
message, and after the far side breaks the endpoint raises EndpointFailure within
`failure_timeout` seconds instead of hanging, and works again after close and open.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from abc import abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import pytest
from lavin.api import (
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
from lavin.testing.entry_points import check_registered

T = TypeVar("T")


class NoLocalBroker(LocalBroker):
    """The kit runs no broker: an endpoint that asks for this one fails as it would
    without a listener."""

    async def open_connection(self, vhost: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        raise EndpointFailure("the shovel kit runs no local broker")


def kit_bodies(count: int, first: int = 0) -> list[bytes]:
    return [f"kit-{index}".encode() for index in range(first, first + count)]


class ShovelEndpointKit:
    """What both kits share: the far side's life around each check, the settings, and
    the timeouts. Checks run in `asyncio.run`, so the subclass's hooks are coroutines run
    on the same loop as the endpoint."""

    endpoint_class: ClassVar[type[ShovelEndpoint]]
    entry_point_group: ClassVar[str]
    # How long the endpoint may take to notice a broken far side, and to move a message.
    failure_timeout: ClassVar[float] = 5.0
    message_timeout: ClassVar[float] = 5.0
    # A folder of the check's own, for a far side that needs files.
    workdir: Path

    @pytest.fixture(autouse=True)
    def _kit_workdir(self, tmp_path: Path) -> None:
        self.workdir = tmp_path

    # -- what the subclass provides --------------------------------------------------------

    async def start_far_side(self) -> None:
        """Start what the endpoint talks to; the default starts nothing."""

    async def stop_far_side(self) -> None:
        """Stop it again after the check, whatever happened; the default does nothing."""

    @abstractmethod
    def endpoint_settings(self) -> EndpointSettings:
        """The settings the endpoint under test starts with, usually `self.settings(uri)`;
        called after `start_far_side`."""

    @abstractmethod
    async def break_far_side(self) -> None:
        """Make the far side go away, as a crash or a lost network would."""

    @abstractmethod
    async def restore_far_side(self) -> None:
        """Bring it back, with what it held before it broke."""

    def new_endpoint(self) -> ShovelEndpoint:
        """The endpoint under test, not yet open; a new one for each start, as the core
        makes one each time it starts a link."""
        return self.endpoint_class(self.endpoint_settings())

    # -- helpers ---------------------------------------------------------------------------

    @staticmethod
    def settings(uri: str, definition: Mapping[str, Any] | None = None, **changes: Any) -> EndpointSettings:
        """Settings as the core makes them for a shovel named `kit-shovel` on vhost `/`."""
        fields: dict[str, Any] = {
            "uri": uri,
            "definition": dict(definition or {}),
            "vhost": "/",
            "link_name": "kit-shovel",
            "ack_mode": AckMode.ON_CONFIRM,
            "local": NoLocalBroker(),
            **changes,
        }
        return EndpointSettings(**fields)

    def run(self, check: Callable[[], Awaitable[None]]) -> None:
        """Run one check on a loop of its own, with the far side up around it."""

        async def framed() -> None:
            await self.start_far_side()
            try:
                await check()
            finally:
                await self.stop_far_side()

        asyncio.run(framed())

    @staticmethod
    async def within(seconds: float, awaitable: Awaitable[T], what: str) -> T:
        try:
            async with asyncio.timeout(seconds):
                return await awaitable
        except TimeoutError:
            pytest.fail(f"{what}: nothing after {seconds:g}s")

    # -- the kit ---------------------------------------------------------------------------

    def test_name_matches_its_entry_point(self) -> None:
        check_registered(self.entry_point_group, self.endpoint_class)


class ShovelSourceKit(ShovelEndpointKit):
    """Inherit it in a class named `Test...`, set `endpoint_class` and write the hooks."""

    entry_point_group: ClassVar[str] = "lavin.shovel.sources"
    # How long to watch for a message that must not come.
    quiet_period: ClassVar[float] = 0.3

    @abstractmethod
    async def put(self, bodies: Sequence[bytes]) -> None:
        """Put messages with these bodies into the far side, in this order."""

    def new_source(self) -> ShovelSource:
        source = self.new_endpoint()
        assert isinstance(source, ShovelSource), f"{source!r} is not a ShovelSource"
        return source

    async def take(
        self, messages: AsyncIterator[tuple[ShovelMessage, Settle]], count: int
    ) -> list[tuple[bytes, Settle]]:
        """The next `count` messages' bodies and settle callbacks."""
        taken: list[tuple[bytes, Settle]] = []

        async def take_them() -> None:
            async for message, settle in messages:
                taken.append((message.body, settle))
                if len(taken) == count:
                    return
            pytest.fail(f"the source ended after {len(taken)} of {count} messages")

        await self.within(self.message_timeout, take_them(), f"{len(taken)} of {count} messages came")
        return taken

    async def assert_nothing_more(self, messages: AsyncIterator[tuple[ShovelMessage, Settle]]) -> None:
        with contextlib.suppress(TimeoutError, StopAsyncIteration):
            async with asyncio.timeout(self.quiet_period):
                message, _ = await anext(messages)
                pytest.fail(f"a settled message came again: {message.body!r}")

    def test_messages_come_in_order(self) -> None:
        async def check() -> None:
            before, after = kit_bodies(10), kit_bodies(10, first=10)
            await self.put(before)
            source = self.new_source()
            try:
                await source.open()
                messages = aiter(source.messages())
                taken = await self.take(messages, 10)
                await self.put(after)
                taken += await self.take(messages, 10)
                assert [body for body, _ in taken] == before + after
                for _, settle in taken:
                    settle(True)
            finally:
                await source.close()

        self.run(check)

    def test_unsettled_messages_come_again_after_a_restart(self) -> None:
        async def check() -> None:
            bodies = kit_bodies(10)
            await self.put(bodies)
            source = self.new_source()
            try:
                await source.open()
                taken = await self.take(aiter(source.messages()), 10)
                for _, settle in taken[:4]:
                    settle(True)
                taken[4][1](False)  # refused: it comes again, as the six never settled do
            finally:
                await source.close()
            source = self.new_source()
            try:
                await source.open()
                messages = aiter(source.messages())
                again = await self.take(messages, 6)
                assert [body for body, _ in again] == bodies[4:], "the unsettled messages, in order"
                for _, settle in again:
                    settle(True)
                await self.assert_nothing_more(messages)
            finally:
                await source.close()

        self.run(check)

    def test_a_broken_far_side_fails_the_source_and_it_works_again_after_a_restart(self) -> None:
        async def check() -> None:
            bodies = kit_bodies(3)
            await self.put(bodies)
            source = self.new_source()
            try:
                await source.open()
                messages = aiter(source.messages())
                (_, settle), *_ = await self.take(messages, 1)
                settle(True)
                await self.break_far_side()
                await self.within(self.failure_timeout, self._until_failure(messages), "the source failed")
            finally:
                await source.close()
            await self.restore_far_side()
            source = self.new_source()
            try:
                await source.open()
                again = await self.take(aiter(source.messages()), 2)
                assert [body for body, _ in again] == bodies[1:]
                for _, settle in again:
                    settle(True)
            finally:
                await source.close()

        self.run(check)

    @staticmethod
    async def _until_failure(messages: AsyncIterator[tuple[ShovelMessage, Settle]]) -> None:
        """Take what was already on its way until the source raises EndpointFailure."""
        with pytest.raises(EndpointFailure):
            async for _ in messages:
                pass


class ShovelDestinationKit(ShovelEndpointKit):
    """Inherit it in a class named `Test...`, set `endpoint_class` and write the hooks."""

    entry_point_group: ClassVar[str] = "lavin.shovel.destinations"

    @abstractmethod
    async def received(self) -> list[bytes]:
        """The bodies the far side holds now, in the order they arrived."""

    def new_destination(self) -> ShovelDestination:
        destination = self.new_endpoint()
        assert isinstance(destination, ShovelDestination), f"{destination!r} is not a ShovelDestination"
        return destination

    async def send_all(self, destination: ShovelDestination, bodies: Sequence[bytes]) -> list[asyncio.Future[None]]:
        return [
            await self.within(self.message_timeout, destination.send(ShovelMessage(body, "kit.key")), "send returned")
            for body in bodies
        ]

    def test_messages_arrive_in_order(self) -> None:
        async def check() -> None:
            bodies = kit_bodies(20)
            destination = self.new_destination()
            try:
                await destination.open()
                futures = await self.send_all(destination, bodies)
                await self.within(self.message_timeout, asyncio.gather(*futures), "every future completed")
                assert await self.received() == bodies
            finally:
                await destination.close()

        self.run(check)

    def test_a_future_completes_once_the_far_side_has_the_message(self) -> None:
        async def check() -> None:
            destination = self.new_destination()
            try:
                await destination.open()
                for body in kit_bodies(5):
                    (future,) = await self.send_all(destination, [body])
                    await self.within(self.message_timeout, future, "the future completed")
                    assert body in await self.received(), "the future completed before the far side had it"
            finally:
                await destination.close()

        self.run(check)

    def test_a_broken_far_side_fails_the_destination_and_it_works_again_after_a_restart(self) -> None:
        async def check() -> None:
            destination = self.new_destination()
            try:
                await destination.open()
                (future,) = await self.send_all(destination, [b"kit-before"])
                await self.within(self.message_timeout, future, "the future completed")
                await self.break_far_side()
                await self.within(self.failure_timeout, self._until_failure(destination), "the destination failed")
            finally:
                await destination.close()
            await self.restore_far_side()
            destination = self.new_destination()
            try:
                await destination.open()
                (future,) = await self.send_all(destination, [b"kit-after"])
                await self.within(self.message_timeout, future, "the future completed")
                assert b"kit-after" in await self.received()
            finally:
                await destination.close()

        self.run(check)

    async def _until_failure(self, destination: ShovelDestination) -> None:
        """Send until `send` or a future raises EndpointFailure; no future may complete
        while the far side is away."""
        deadline = time.monotonic() + self.failure_timeout
        index = 0
        with pytest.raises(EndpointFailure):
            while time.monotonic() < deadline:
                future = await destination.send(ShovelMessage(f"kit-broken-{index}".encode(), "kit.key"))
                index += 1
                await asyncio.wait([future], timeout=0.2)
                if not future.done():
                    future.add_done_callback(_retrieved)  # it fails later, or on close
                    continue
                failure = future.exception()
                if failure is None:
                    pytest.fail("a future completed while the far side was away")
                raise failure


def _retrieved(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


__all__ = ["NoLocalBroker", "ShovelDestinationKit", "ShovelEndpointKit", "ShovelSourceKit", "kit_bodies"]

"""The built-in `amqp` shovel endpoints pass the shovel kits, against a Lavin broker the
checks start, kill -9 and start again on the same data and ports."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pika
from broker_process import BrokerProcess, stop_quietly
from lavin.api import EndpointSettings
from lavin.plugins.federation.amqp_endpoints import AmqpDestination, AmqpSource
from lavin.testing import ShovelDestinationKit, ShovelSourceKit

QUEUE = "kit-queue"


class AmqpFarSide:
    """A broker of the check's own, with the kit's queue."""

    broker: BrokerProcess

    async def start_broker(self, workdir_name: str) -> None:
        assert isinstance(self, (ShovelSourceKit, ShovelDestinationKit))
        self.broker = BrokerProcess(self.workdir / workdir_name)
        await asyncio.to_thread(self.broker.start)
        await asyncio.to_thread(self._blocking, lambda channel: channel.queue_declare(QUEUE, durable=True))

    def _blocking(self, action: object) -> None:
        connection = pika.BlockingConnection(pika.URLParameters(self.broker.url))
        try:
            channel = connection.channel()
            channel.confirm_delivery()
            assert callable(action)
            action(channel)
        finally:
            connection.close()

    async def stop_far_side(self) -> None:
        stop_quietly(self.broker)

    async def break_far_side(self) -> None:
        # kill -9, as a crash; first a moment for an ack just written to reach the broker
        # (the kit expects a settled message not to come again, and an ack still in the
        # socket when the broker dies is lost, as with any broker).
        await asyncio.sleep(0.3)
        await asyncio.to_thread(self.broker.kill)

    async def restore_far_side(self) -> None:
        await asyncio.to_thread(self.broker.start)


class TestAmqpSourceKit(AmqpFarSide, ShovelSourceKit):
    endpoint_class = AmqpSource

    async def start_far_side(self) -> None:
        await self.start_broker("source")

    def endpoint_settings(self) -> EndpointSettings:
        return self.settings(self.broker.url, {"src-queue": QUEUE})

    async def put(self, bodies: Sequence[bytes]) -> None:
        def publish(channel: pika.adapters.blocking_connection.BlockingChannel) -> None:
            for body in bodies:
                channel.basic_publish("", QUEUE, body, pika.BasicProperties(delivery_mode=2))

        await asyncio.to_thread(self._blocking, publish)


class TestAmqpDestinationKit(AmqpFarSide, ShovelDestinationKit):
    endpoint_class = AmqpDestination
    arrived: list[bytes]

    async def start_far_side(self) -> None:
        self.arrived = []
        await self.start_broker("destination")

    def endpoint_settings(self) -> EndpointSettings:
        return self.settings(self.broker.url, {"dest-queue": QUEUE})

    async def received(self) -> list[bytes]:
        """Everything that arrived so far: taken from the queue and kept, so that a later
        call still sees it."""

        def drain(channel: pika.adapters.blocking_connection.BlockingChannel) -> None:
            while (message := channel.basic_get(QUEUE, auto_ack=True))[0] is not None:
                self.arrived.append(message[2])

        await asyncio.to_thread(self._blocking, drain)
        return list(self.arrived)

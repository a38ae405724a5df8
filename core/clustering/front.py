"""What a follower serves on the node's AMQP port: clients passed through to the leader."""

from __future__ import annotations

from lavin.clustering.proxy import AmqpProxy, LeaderAmqp
from lavin.listeners.prebound import PreboundSockets


class FollowerFront:
    def __init__(self, prebound: PreboundSockets, leader_amqp: LeaderAmqp) -> None:
        self.prebound = prebound
        self.leader_amqp = leader_amqp
        self._amqp: AmqpProxy | None = None

    async def start(self) -> None:
        """Serve the node's ports as a follower (once; again after `stop`)."""
        if self._amqp is not None:
            return
        listening = self.prebound.take("amqp")
        assert listening is not None  # bound by the node first
        self._amqp = AmqpProxy(self.leader_amqp)
        await self._amqp.start(listening)

    async def stop(self) -> None:
        if self._amqp is not None:
            await self._amqp.stop()
            self._amqp = None

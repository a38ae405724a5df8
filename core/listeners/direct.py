"""Connections of shovels and federation links to this broker, for URIs with no host
(`amqp://`, `amqp:///vhost`): a socket pair, one end an AMQP connection of the broker as
a listener would have accepted it, the other handed to the link. No port is needed, so a
broker with its AMQP listener on a unix socket or on port 0 shovels locally all the same.

The link is logged in without a password, as `LINK_USER` with every permission on the
vhost it asked for and none elsewhere; who may point a link at which vhost is checked
when its parameter is set.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Final

from lavin.amqp.connection import Connection
from lavin.api.auth import User, VHostPermissions
from lavin.api.shovel import LocalBroker
from lavin.broker.broker import Broker

# What /api/connections shows as the user of a link's local connection.
LINK_USER: Final = "lavin-link"


class DirectConnections(LocalBroker):
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    async def open_connection(self, vhost: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        link_end, broker_end = socket.socketpair()
        user = User(LINK_USER, permissions={vhost: VHostPermissions()})
        loop = asyncio.get_running_loop()
        try:
            await loop.connect_accepted_socket(lambda: Connection(self.broker, direct_user=user), broker_end)
            return await asyncio.open_connection(sock=link_end)
        except BaseException:
            link_end.close()
            broker_end.close()
            raise

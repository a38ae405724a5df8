"""Every socket the broker listens on, and what it hands each accepted connection to: the
AMQP listeners (`amqp`: TCP, AMQPS, unix sockets, the PROXY protocol), an HTTP listener
(`http`: one aiohttp application over TCP, TLS or a unix socket), the control socket, and
the management plane that opens the HTTP ones (`management_plane`).

Not here: what is spoken once a connection is accepted (`lavin.amqp`, `lavin.management`),
the transports under them (`lavin.transport`).
"""

"""What carries AMQP and HTTP bytes besides a plain TCP socket: TLS, the PROXY protocol,
unix sockets and WebSocket. Each piece wraps an asyncio protocol and hands it a transport,
so the AMQP connection and aiohttp see a stream whatever carries it."""

"""Lavin's own small blocking AMQP 0-9-1 client (`wire`), shared by the Spark connector, the
benchmarks and the tests, over plain TCP, TLS or a WebSocket (`websocket`, an RFC 6455 client
over a blocking socket). It imports only `lavin.api`, so it can talk to any broker.
"""

"""AMQP 0-9-1 on one connection: frames in and out (`codec`), the connection and its
handshake, channels, consumers, publisher confirms, transactions, the control methods
(`handlers`) and each connection's permission checks (`authorization`). It calls the broker
(`lavin.broker`) and implements the ports the broker defines for it.
"""

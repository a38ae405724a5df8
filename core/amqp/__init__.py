"""AMQP 0-9-1 on one connection: frames in and out (`codec`), the connection's frame loop
(`connection`), its handshake and login (`handshake`), its write side and the reasons it
stops reading (`output`), its heartbeats (`heartbeats`); channels, consumers and their
timeout (`consumer_timeout`), publisher confirms, transactions, the control methods
(`handlers`) and each connection's permission checks (`authorization`). It calls the broker
(`lavin.broker`) and implements the ports the broker defines for it.
"""

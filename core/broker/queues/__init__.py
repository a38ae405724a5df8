"""Queues and what they hold: `Queue` and `MessageQueue` (consumers, flow control, TTL,
limits, delivery limits), stream queues with their readers and stream-info, and the ports the
protocol layer implements to consume from them (`consumer.Consumer`, `consumer.Settles`,
`flow.PublisherFlow`). Also the per-message features a queue keeps: expiry and delivery
counts.

Not here: how messages are stored (`lavin.storage`, behind `lavin.api.queue`), where they are
routed from (`lavin.broker.routing`), the settings policies give them (`lavin.broker.policy`).
"""

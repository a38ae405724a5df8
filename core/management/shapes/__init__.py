"""RabbitMQ's JSON for the broker's objects, out of the broker and back in: users, vhosts
and permissions (`access`), exchanges, queues, bindings and messages (`objects`), what runs
now (`runtime`: connections, channels, consumers, the node, the overview), and `message_stats`.

The same shapes serve the HTTP endpoints and definition documents. Not here: routing,
status codes and who may ask (`lavin.management.routes`, `lavin.management.http`).
"""

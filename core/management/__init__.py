"""The management API: users, vhosts, permissions, limits and definitions as JSON, in the
shapes of RabbitMQ's management plugin.

`app` builds the aiohttp application; `control_socket` serves it to local root on a unix
socket (what `lavin ctl` talks to); `shapes` turns the broker's objects into RabbitMQ's JSON
and back; `definitions` imports and exports whole definition documents.
"""

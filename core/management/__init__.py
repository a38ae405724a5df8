"""The management API in the shapes of RabbitMQ's management plugin, and its web UI.

`app` builds the aiohttp application from the endpoint modules (`routes/`, one per
resource); `http/` is what they share (replies, who is asking, list parameters); `shapes/`
turns the broker's objects into RabbitMQ's JSON and back; `definitions` imports and exports
whole definition documents; `prometheus/` is the metrics exporter; `ui/` the web UI's files.
The sockets it is served on are `lavin.listeners`'.
"""

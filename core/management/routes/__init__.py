"""The management API's endpoints: one module per resource, as RabbitMQ's and LavinMQ's
HTTP controllers are, with RabbitMQ's paths, JSON and status codes. Each module's docstring
lists the paths it serves and which tags may use them; `lavin.management.app` adds every
module's `routes`, in one ordered tuple.

- `users`: users, `/api/authenticate`, `/api/whoami`
- `vhosts`: vhosts and vhost limits
- `permissions`: permissions and topic permissions
- `definitions`: `/api/definitions` and `/api/definitions/{vhost}` (HTTP only; the work is
  `lavin.management.definitions`')
- `nodes`: overview, nodes, cluster name, extensions, TLS reload
- `connections`, `channels` (with consumers), `health` (health checks, aliveness test)
- `policies` (and operator policies), `parameters` (runtime and global)
- `links`: the status of shovels and federation links, shovel control
- `exchanges`, `queues`, `bindings`
- `ui`: the web UI's files

What several of them share (replies, who is asking, list parameters, who may reach which
objects) is `lavin.management.http`.
"""

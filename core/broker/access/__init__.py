"""Who may do what: users, vhosts, permissions, topic permissions and vhost limits
(`AccessControl`, kept in `users.json` and `vhosts.json` by `lavin.storage.metadata.access_files`), and
RabbitMQ's password hashes.

Not here: the checks a connection makes on each method (`lavin.amqp.authorization`), the
authentication backends (plugins behind `lavin.api.auth`), the management API's tag rules.
"""

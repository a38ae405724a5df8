"""What the management endpoints share: RabbitMQ's JSON replies and error bodies
(`replies`), who is asking and what its tags allow (`requester`), list parameters (sorting,
columns, pagination: `listing`), and which vhosts and objects a user may reach:
exchanges, queues and bindings (`object_access`), policies and parameters
(`policy_access`), connections, channels and consumers (`runtime_access`).

Not here: the endpoints (`lavin.management.routes`), the JSON of each object
(`lavin.management.shapes`), the sockets the API is served on (`lavin.listeners`).
"""

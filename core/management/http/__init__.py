"""What every management endpoint shares: RabbitMQ's JSON replies and error bodies
(`replies`), who is asking and what its tags allow (`requester`), list parameters (sorting,
columns, pagination: `listing`), and which vhosts and objects a user may reach (`object_access`).

Not here: the endpoints (`lavin.management.routes`), the JSON of each object
(`lavin.management.shapes`), the sockets the API is served on (`lavin.listeners`).
"""

"""The broker's semantics, below the protocol and above storage: `Broker` (connections,
authentication, vhosts) and `VHost` (exchanges, queues, bindings, `publish`), with their rooms:

- `access/`: users, vhosts, permissions and limits;
- `policy/`: queue and exchange arguments, policies, runtime and global parameters;
- `routing/`: exchanges and where a message goes;
- `queues/`: queues, streams and the ports consumers and publishers implement;
- `runtime/`: alarms, statistics, the group commit and other services that know no queue.

Not here: AMQP frames and connections (`lavin.amqp`), the management API (`lavin.management`),
bytes on disk (`lavin.storage`), exchange and queue types (plugins behind `lavin.api`).
"""

"""Definitions import and export: the one place a definitions document (RabbitMQ's JSON of
users, vhosts, permissions, limits, parameters, policies, exchanges, queues and bindings)
is read and written.

`importer` applies a document, whole or into one vhost, checking its policies and
parameters before anything changes, and reports what became of each object; `exporter`
writes the broker's document, or one vhost's; `document` is the layout both share.

Callers: the API's `/api/definitions[/{vhost}]` (`lavin.management.routes.definitions`),
which `lavin ctl export_definitions` and `import_definitions` reach over the control
socket; start-up, which imports `[main] load_definitions` (`lavin.server`); and
`/api/parameters`, which lists a vhost's runtime parameters as the export writes them.
"""

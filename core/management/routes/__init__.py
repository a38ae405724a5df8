"""The management API's endpoints: one module per resource, with RabbitMQ's paths, JSON
and status codes. `lavin.management.app` adds each module's `routes`.
"""

"""The Prometheus exporter: RabbitMQ's metric families read from the broker at scrape time
(`families`, a prometheus_client collector), what they read (`sources`), and the
`/metrics[/per-object|/detailed]` endpoints (`routes`), served on their own listener and on
the management API's.
"""

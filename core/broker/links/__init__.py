"""Shovels and federation links: runtime parameters that move messages between brokers."""

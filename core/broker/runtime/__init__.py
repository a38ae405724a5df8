"""The broker's runtime services, which know no exchange or queue semantics: resource
alarms (memory, disk), the allocator's tuning, message statistics and their sampler, the
broker's lifetime counters, the group commit (one fsync per loop tick), and the recovery log.

They sit at the bottom of the broker: they import nothing of its other packages, and
what they need to know of a connection or queue comes in through a port defined here
(`stats.ObservedConnection`, `alarms.BlockedPublisher`) or a callback.
"""

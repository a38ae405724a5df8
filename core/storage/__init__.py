"""Everything the broker writes to disk, below the broker and knowing nothing of it: the
message stores of queues (`segments`), stream logs (`streams`), the metadata documents
(`metadata`: durable definitions, users and vhosts, policies), queue directories, durable
directory changes (`disk`) and damaged files kept aside (`quarantine`). Queue types receive
the engines through `toolkit` (`lavin.api.StorageToolkit`).
"""

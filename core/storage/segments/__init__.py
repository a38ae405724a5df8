"""The message store of a queue: records and their layout on disk (`record`), segment and
ack files (`segment_files`), the store itself (`segment_store`: append-only segments read by
a sequential cursor), the decoded window of the newest messages, and the process-wide pool
of open files. Stream logs reuse the record layout and the segment files (`lavin.storage.streams`).
"""

"""The log of a stream queue: append-only segments read by offset (`stream_store`), the
sparse index of each segment (`stream_index`) and the named consumers' stored offsets
(`stream_offsets`). Records are those of `lavin.storage.segments`.
"""

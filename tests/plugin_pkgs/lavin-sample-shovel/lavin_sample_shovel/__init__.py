"""`file` shovel endpoints: a source that reads JSON lines from a file, and a destination
that appends them, one message a line (`file:///abs/path.jsonl`).

A third-party endpoint pair in a small form; it imports nothing from Lavin but `lavin.api`.
Every file operation runs in a worker thread, never on the broker's event loop.
"""

from __future__ import annotations

from lavin_sample_shovel.destination import FileDestination
from lavin_sample_shovel.lines import decode_line, encode_line, file_path
from lavin_sample_shovel.source import FileSource

__all__ = ["FileDestination", "FileSource", "decode_line", "encode_line", "file_path"]

"""The `file` source: yields the file's JSON lines in order, following it as it grows.

What was settled is kept in a sidecar file, `<path>.offset`: the byte offset up to which
every line was settled True. A line not settled, or settled False, holds the offset back,
so it (and any line after it) comes again after a restart: at least once, as the contract
asks.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from collections.abc import AsyncIterator, Mapping
from typing import IO, Any, ClassVar

from lavin.api import AckMode, EndpointFailure, EndpointSettings, Settle, ShovelMessage, ShovelSource

from lavin_sample_shovel.lines import decode_line, file_path

READ_SIZE = 64 * 1024
POLL_INTERVAL = 0.05  # seconds between looks at a file that has no new line


class FileSource(ShovelSource):
    name: ClassVar[str] = "file"

    def __init__(self, settings: EndpointSettings) -> None:
        super().__init__(settings)
        self.path = file_path(settings.uri)
        self.offset_path = f"{self.path}.offset"
        self._file: IO[bytes] | None = None
        self._offset = 0  # where the settled prefix ends
        self._saved_offset = 0
        self._saver: asyncio.Task[None] | None = None
        self._unsettled: deque[int] = deque()  # the end of each line delivered, in order
        self._settled: set[int] = set()  # ends settled True, not yet at the head

    @classmethod
    def validate(cls, uri: str, definition: Mapping[str, Any]) -> None:
        file_path(uri)

    def details(self) -> Mapping[str, Any]:
        return {"src_uri": self.settings.uri}

    async def open(self) -> None:
        self._unsettled.clear()
        self._settled.clear()
        try:
            self._offset = self._saved_offset = await asyncio.to_thread(_read_offset, self.offset_path)
            self._file = await asyncio.to_thread(open, self.path, "rb")
            await asyncio.to_thread(self._file.seek, self._offset)
        except (OSError, ValueError) as exc:
            raise EndpointFailure(f"cannot read {self.path}: {exc}") from None

    async def close(self) -> None:
        if self._saver is not None:
            await asyncio.gather(self._saver, return_exceptions=True)
        file, self._file = self._file, None
        if file is not None:
            await asyncio.to_thread(file.close)

    async def messages(self) -> AsyncIterator[tuple[ShovelMessage, Settle]]:
        file = self._file
        if file is None:
            raise EndpointFailure(f"the file source {self.path} is not open")
        position, buffer = self._offset, b""
        while True:
            try:
                chunk = await asyncio.to_thread(file.read, READ_SIZE)
            except (OSError, ValueError) as exc:
                if self._file is None:
                    return  # closed while reading
                raise EndpointFailure(f"cannot read {self.path}: {exc}") from None
            if not chunk:
                await self._check_still_there(file)
                await asyncio.sleep(POLL_INTERVAL)
                continue
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                start, position = position, position + len(line) + 1
                if not line.strip():
                    self._deliver(position)(True)  # nothing to move
                    continue
                try:
                    message = decode_line(line)
                except ValueError as exc:
                    raise EndpointFailure(f"{self.path}: the line at byte {start} is not a message: {exc}") from None
                yield message, self._deliver(position)

    async def _check_still_there(self, file: IO[bytes]) -> None:
        """Fail when the file was removed or replaced, as a broker that went away would."""
        try:
            now, opened = await asyncio.to_thread(os.stat, self.path), os.fstat(file.fileno())
        except OSError as exc:
            raise EndpointFailure(f"{self.path} went away: {exc.strerror or exc}") from None
        if (now.st_dev, now.st_ino) != (opened.st_dev, opened.st_ino):
            raise EndpointFailure(f"{self.path} was replaced by another file")

    def _deliver(self, end: int) -> Settle:
        self._unsettled.append(end)
        if self.settings.ack_mode is AckMode.NO_ACK:
            self._settle(end, True)
            return _ignore
        return lambda ok: self._settle(end, ok)

    def _settle(self, end: int, ok: bool) -> None:
        if not ok or self._file is None:
            return  # a refused line holds the offset back: it comes again after a restart
        self._settled.add(end)
        while self._unsettled and self._unsettled[0] in self._settled:
            self._offset = self._unsettled.popleft()
            self._settled.discard(self._offset)
        if self._offset != self._saved_offset and (self._saver is None or self._saver.done()):
            self._saver = asyncio.get_running_loop().create_task(self._save_offsets())

    async def _save_offsets(self) -> None:
        while self._saved_offset != self._offset:
            offset = self._offset
            await asyncio.to_thread(_write_offset, self.offset_path, offset)
            self._saved_offset = offset


def _ignore(ok: bool) -> None:
    """Settling does nothing in no-ack mode: the line was forgotten when it was delivered."""


def _read_offset(path: str) -> int:
    try:
        with open(path) as file:
            return int(file.read().strip() or 0)
    except FileNotFoundError:
        return 0


def _write_offset(path: str, offset: int) -> None:
    temporary = f"{path}.tmp"
    with open(temporary, "w") as file:
        file.write(f"{offset}\n")
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)

"""The `file` destination: appends each message to the file as a JSON line. A message's
future completes once its line is flushed and fsynced; lines are written in send order, a
batch of waiting messages at a time."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import Any, ClassVar

from lavin.api import EndpointFailure, EndpointSettings, ShovelDestination, ShovelMessage

from lavin_sample_shovel.lines import encode_line, file_path

WAITING_LIMIT = 1000  # messages sent but not yet written; send waits beyond it

Pending = tuple[bytes, asyncio.Future[None]]


class FileDestination(ShovelDestination):
    name: ClassVar[str] = "file"

    def __init__(self, settings: EndpointSettings) -> None:
        super().__init__(settings)
        self.path = file_path(settings.uri)
        self._waiting: asyncio.Queue[Pending] = asyncio.Queue(WAITING_LIMIT)
        self._writing: list[Pending] = []
        self._writer: asyncio.Task[None] | None = None
        self._failure: EndpointFailure | None = None

    @classmethod
    def validate(cls, uri: str, definition: Mapping[str, Any]) -> None:
        file_path(uri)

    def details(self) -> Mapping[str, Any]:
        return {"dest_uri": self.settings.uri}

    async def open(self) -> None:
        self._failure = None
        await self._write([])  # the folder exists and the file can be appended to
        self._writer = asyncio.create_task(self._write_batches())

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.cancel()
            await asyncio.gather(self._writer, return_exceptions=True)
        self._fail(EndpointFailure(f"the file destination {self.path} was closed"))

    async def send(self, message: ShovelMessage) -> asyncio.Future[None]:
        if self._failure is not None:
            raise self._failure
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await self._waiting.put((encode_line(message), future))
        return future

    async def _write_batches(self) -> None:
        while True:
            self._writing = [await self._waiting.get()]
            while not self._waiting.empty():
                self._writing.append(self._waiting.get_nowait())
            await self._write([line for line, _ in self._writing])
            for _, future in self._writing:
                if not future.done():
                    future.set_result(None)
            self._writing = []

    async def _write(self, lines: list[bytes]) -> None:
        try:
            await asyncio.to_thread(_append, self.path, lines)
        except OSError as exc:
            failure = EndpointFailure(f"cannot write to {self.path}: {exc.strerror or exc}")
            self._fail(failure)
            raise failure from None

    def _fail(self, failure: EndpointFailure) -> None:
        """Fail every message not yet written; later sends raise `failure`."""
        self._failure = self._failure or failure
        pending = self._writing
        self._writing = []
        while not self._waiting.empty():
            pending.append(self._waiting.get_nowait())
        for _, future in pending:
            if not future.done():
                future.set_exception(self._failure)


def _append(path: str, lines: list[bytes]) -> None:
    # Opened for each batch, so that a file moved away (rotated) is started again.
    with open(path, "ab") as file:
        file.writelines(lines)
        file.flush()
        os.fsync(file.fileno())

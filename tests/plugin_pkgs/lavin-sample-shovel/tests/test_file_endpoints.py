"""The file source and destination pass Lavin's shovel endpoint kits, and keep what the
JSON-lines format promises."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from lavin.api import EndpointFailure, EndpointSettings, InvalidEndpoint, ShovelMessage
from lavin.testing import ShovelDestinationKit, ShovelSourceKit
from lavin_sample_shovel import FileDestination, FileSource, decode_line, encode_line


class TestFileSource(ShovelSourceKit):
    endpoint_class = FileSource

    @property
    def path(self) -> Path:
        return self.workdir / "in.jsonl"

    async def start_far_side(self) -> None:
        self.path.touch()

    def endpoint_settings(self) -> EndpointSettings:
        return self.settings(self.path.as_uri())

    async def put(self, bodies: Sequence[bytes]) -> None:
        with self.path.open("ab") as file:
            file.writelines(encode_line(ShovelMessage(body, "kit.key")) for body in bodies)

    async def break_far_side(self) -> None:
        self.path.rename(self.workdir / "away.jsonl")

    async def restore_far_side(self) -> None:
        (self.workdir / "away.jsonl").rename(self.path)

    def test_a_line_that_is_not_a_message_fails_the_source(self) -> None:
        async def check() -> None:
            await self.put([b"good"])
            with self.path.open("ab") as file:
                file.write(b"{not json\n")
            source = self.new_source()
            try:
                await source.open()
                messages = aiter(source.messages())
                assert (await anext(messages))[0].body == b"good"
                start = len(encode_line(ShovelMessage(b"good", "kit.key")))
                with pytest.raises(EndpointFailure, match=f"the line at byte {start} is not a message"):
                    await anext(messages)
            finally:
                await source.close()

        self.run(check)


class TestFileDestination(ShovelDestinationKit):
    endpoint_class = FileDestination

    @property
    def path(self) -> Path:
        return self.workdir / "out" / "messages.jsonl"

    async def start_far_side(self) -> None:
        self.path.parent.mkdir()

    def endpoint_settings(self) -> EndpointSettings:
        return self.settings(self.path.as_uri())

    async def received(self) -> list[bytes]:
        if not self.path.exists():
            return []
        return [decode_line(line).body for line in self.path.read_bytes().splitlines()]

    async def break_far_side(self) -> None:
        self.path.parent.rename(self.workdir / "away")

    async def restore_far_side(self) -> None:
        (self.workdir / "away").rename(self.path.parent)


def test_a_message_round_trips_through_a_line() -> None:
    message = ShovelMessage(
        b"\xff\x00 not utf-8", "rk", "ex", {"content_type": "text/plain", "headers": {"n": 1}}, redelivered=False
    )
    line = encode_line(message)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line)["body_base64"]
    assert decode_line(line) == message
    assert json.loads(encode_line(ShovelMessage(b"text")))["body"] == "text"


@pytest.mark.parametrize(
    ("uri", "reason"),
    [
        ("http://host/x.jsonl", "take file:// URIs"),
        ("file://otherhost/x.jsonl", "on this host"),
        ("file:relative.jsonl", "absolute path"),
        ("file:///tmp/", "absolute path"),
    ],
)
def test_validate_refuses_what_is_not_a_local_file(uri: str, reason: str) -> None:
    for endpoint in (FileSource, FileDestination):
        with pytest.raises(InvalidEndpoint, match=reason):
            endpoint.validate(uri, {})


def test_the_destination_writes_every_line_once_in_order(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"

    async def check() -> None:
        destination = FileDestination(ShovelDestinationKit.settings(path.as_uri()))
        await destination.open()
        try:
            futures = [await destination.send(ShovelMessage(f"m{index}".encode())) for index in range(2000)]
            await asyncio.wait_for(asyncio.gather(*futures), 30)
        finally:
            await destination.close()

    asyncio.run(check())
    assert [decode_line(line).body for line in path.read_bytes().splitlines()] == [
        f"m{index}".encode() for index in range(2000)
    ]

"""The file format both endpoints share: one JSON object a line, and the URI they take."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

from lavin.api import InvalidEndpoint, ShovelMessage


def file_path(uri: str) -> str:
    """The absolute path a `file:///...` URI names; InvalidEndpoint for any other URI."""
    parts = urlsplit(uri)
    if parts.scheme != "file":
        raise InvalidEndpoint(f"the file endpoints take file:// URIs, not {parts.scheme or 'none'}://")
    if parts.netloc not in ("", "localhost"):
        raise InvalidEndpoint(f"a file URI names a file on this host, not on {parts.netloc!r}")
    path = unquote(parts.path)
    if not path.startswith("/") or path.endswith("/"):
        raise InvalidEndpoint(f"a file URI needs the absolute path of a file (file:///dir/name.jsonl), not {uri!r}")
    return path


def encode_line(message: ShovelMessage) -> bytes:
    """A message as one JSON line; a body that is not UTF-8 is kept as base64."""
    record: dict[str, Any] = {"exchange": message.exchange, "routing_key": message.routing_key}
    try:
        record["body"] = message.body.decode("utf-8")
    except UnicodeDecodeError:
        record["body_base64"] = base64.b64encode(message.body).decode("ascii")
    record["properties"] = dict(message.properties)
    # Property values JSON has no type for (timestamps, decimals) are kept as text.
    return json.dumps(record, default=str, ensure_ascii=False).encode("utf-8") + b"\n"


def decode_line(line: bytes) -> ShovelMessage:
    """The message a line holds; ValueError when it holds none."""
    record = json.loads(line)
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    if "body_base64" in record:
        body = base64.b64decode(record["body_base64"], validate=True)
    elif isinstance(record.get("body"), str):
        body = record["body"].encode("utf-8")
    else:
        raise ValueError("no body or body_base64")
    properties = record.get("properties", {})
    if not isinstance(properties, Mapping):
        raise ValueError("properties is not an object")
    return ShovelMessage(
        body,
        routing_key=str(record.get("routing_key", "")),
        exchange=str(record.get("exchange", "")),
        properties=dict(properties),
    )

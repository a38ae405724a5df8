"""Deliveries to Arrow record batches in the row schema.

Yielding Arrow batches instead of tuples skips Spark's per-value Python converters, which
would otherwise cost more than reading the messages.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
from collections.abc import Mapping

import pyarrow as pa
from lavin.client.wire import Delivery
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType
from pyspark_lavin.schema import PROPERTY_ATTRIBUTES

# Added by the broker on delivery; the row has it as the `offset` column.
STREAM_OFFSET_HEADER = "x-stream-offset"


def render_header_value(value: object) -> str | None:
    """A field-table value as text: numbers and booleans as JSON would spell them, byte
    strings as UTF-8 (base64 when they are not text), nested tables and arrays as JSON."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(_jsonable(value), separators=(",", ":"), ensure_ascii=False)
    jsonable = _jsonable(value)
    return jsonable if isinstance(jsonable, str) else str(jsonable)


def _jsonable(value: object) -> object:
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    if isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
        try:
            return data.decode()
        except UnicodeDecodeError:
            return base64.b64encode(data).decode("ascii")
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    return value


def header_entries(headers: Mapping[str, object] | None) -> list[tuple[str, str | None]]:
    if not headers:
        return []
    return [(key, render_header_value(value)) for key, value in headers.items() if key != STREAM_OFFSET_HEADER]


class RecordBatchBuilder:
    """Collects deliveries and turns them into one Arrow batch at a time."""

    def __init__(self, schema: StructType) -> None:
        # Spark checks a returned batch's schema for equality with exactly this one.
        self._schema = to_arrow_schema(schema, timezone="UTC")
        self._properties_type = self._schema.field("properties").type
        self._offsets: list[int] = []
        self._deliveries: list[Delivery] = []
        self.body_bytes = 0

    def __len__(self) -> int:
        return len(self._offsets)

    def add(self, offset: int, delivery: Delivery) -> None:
        self._offsets.append(offset)
        self._deliveries.append(delivery)
        self.body_bytes += len(delivery.body)

    def build(self) -> pa.RecordBatch:
        """The rows added since the last build, as one batch."""
        deliveries = self._deliveries
        properties = [delivery.properties for delivery in deliveries]
        property_fields = list(self._properties_type)
        property_columns = [
            pa.array([getattr(item, attribute) for item in properties], type=field.type)
            for attribute, field in zip(PROPERTY_ATTRIBUTES, property_fields, strict=True)
        ]
        columns = [
            self._offsets,
            [item.timestamp for item in properties],
            [delivery.exchange for delivery in deliveries],
            [delivery.routing_key for delivery in deliveries],
            [header_entries(item.headers) for item in properties],
            pa.StructArray.from_arrays(property_columns, fields=property_fields),
            [delivery.body for delivery in deliveries],
        ]
        arrays = [
            column if isinstance(column, pa.Array) else pa.array(column, type=field.type)
            for column, field in zip(columns, self._schema, strict=True)
        ]
        self._offsets, self._deliveries, self.body_bytes = [], [], 0
        return pa.RecordBatch.from_arrays(arrays, schema=self._schema)

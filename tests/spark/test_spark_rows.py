"""Deliveries to Arrow batches in the row schema: no broker, no JVM."""

from __future__ import annotations

import datetime
import decimal

import pytest
from lavin.client.wire import Delivery
from pamqp.commands import Basic
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType
from pyspark_lavin.rows import RecordBatchBuilder, header_entries, render_header_value
from pyspark_lavin.schema import ROW_SCHEMA, check_schema

UTC = datetime.UTC


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("text", "text"),
        (None, None),
        (True, "true"),
        (7, "7"),
        (2.5, "2.5"),
        (decimal.Decimal("1.25"), "1.25"),
        (b"bytes", "bytes"),
        (b"\xff\x00", "/wA="),
        (datetime.datetime(2024, 5, 1, 12, 0, tzinfo=UTC), "2024-05-01T12:00:00+00:00"),
        ({"a": 1, "b": [True, b"x"]}, '{"a":1,"b":[true,"x"]}'),
        ([1, "two"], '[1,"two"]'),
    ],
)
def test_render_header_value(value: object, text: str | None) -> None:
    assert render_header_value(value) == text


def test_the_stream_offset_header_is_left_out_of_the_headers_column() -> None:
    assert header_entries({"x-stream-offset": 5, "tenant": "acme"}) == [("tenant", "acme")]
    assert header_entries(None) == []


def test_batches_match_the_arrow_schema_spark_expects() -> None:
    sent_at = datetime.datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
    properties = Basic.Properties(
        content_type="application/json",
        delivery_mode=2,
        priority=3,
        message_id="m-1",
        timestamp=sent_at,
        message_type="order.created",
        app_id="shop",
        headers={"x-stream-offset": 41, "tenant": "acme", "attempt": 2},
    )
    builder = RecordBatchBuilder(ROW_SCHEMA)
    builder.add(41, Delivery(1, "", "orders", properties, b'{"id": 1}'))
    builder.add(42, Delivery(2, "amq.direct", "orders", Basic.Properties(), b""))
    assert (len(builder), builder.body_bytes) == (2, 9)

    batch = builder.build()

    assert batch.schema.equals(to_arrow_schema(ROW_SCHEMA, timezone="UTC"))
    assert len(builder) == 0
    first, second = batch.to_pylist()
    assert first["offset"] == 41
    assert first["timestamp"] == sent_at
    assert (first["exchange"], first["routing_key"]) == ("", "orders")
    assert first["headers"] == [("tenant", "acme"), ("attempt", "2")]
    assert first["body"] == b'{"id": 1}'
    assert first["properties"] == {
        "content_type": "application/json", "content_encoding": None, "delivery_mode": 2,
        "priority": 3, "correlation_id": None, "reply_to": None, "expiration": None,
        "message_id": "m-1", "timestamp": sent_at, "type": "order.created", "user_id": None,
        "app_id": "shop",
    }  # fmt: skip
    assert second["timestamp"] is None
    assert second["headers"] == []
    assert set(second["properties"].values()) == {None}


def test_a_user_schema_other_than_the_row_schema_is_refused() -> None:
    check_schema(ROW_SCHEMA)
    with pytest.raises(ValueError, match="fixed schema"):
        check_schema(StructType(ROW_SCHEMA.fields[:-1]))

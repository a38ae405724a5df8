"""The fixed row schema of the lavin source: one row per stream message."""

from __future__ import annotations

from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

PROPERTY_NAMES = (
    "content_type", "content_encoding", "delivery_mode", "priority", "correlation_id", "reply_to",
    "expiration", "message_id", "timestamp", "type", "user_id", "app_id",
)  # fmt: skip
# The same, as attributes of pamqp's Basic.Properties (which calls `type` message_type).
PROPERTY_ATTRIBUTES = tuple("message_type" if name == "type" else name for name in PROPERTY_NAMES)
_PROPERTY_TYPES = {"delivery_mode": IntegerType(), "priority": IntegerType(),
                   "timestamp": TimestampType()}  # fmt: skip

PROPERTIES_TYPE = StructType([StructField(name, _PROPERTY_TYPES.get(name, StringType())) for name in PROPERTY_NAMES])

ROW_SCHEMA = StructType(
    [
        StructField("offset", LongType(), nullable=False),
        StructField("timestamp", TimestampType()),
        StructField("exchange", StringType()),
        StructField("routing_key", StringType()),
        StructField("headers", MapType(StringType(), StringType())),
        StructField("properties", PROPERTIES_TYPE),
        StructField("body", BinaryType()),
    ]
)


def check_schema(schema: StructType) -> None:
    """Rows are built column by column for ROW_SCHEMA; a user schema must be that one."""
    given = [(field.name, field.dataType.simpleString()) for field in schema.fields]
    expected = [(field.name, field.dataType.simpleString()) for field in ROW_SCHEMA.fields]
    if given != expected:
        raise ValueError(
            "the lavin source has a fixed schema; leave out .schema(...) and select or cast"
            f" columns after load(). Expected {ROW_SCHEMA.simpleString()},"
            f" got {schema.simpleString()}"
        )

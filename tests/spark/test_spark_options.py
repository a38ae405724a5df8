"""Option parsing: no broker, no JVM."""

from __future__ import annotations

import pytest
from pyspark_lavin.options import LavinOptions, OptionError, parse_options

REQUIRED = {"uri": "amqp://guest:guest@127.0.0.1:5672/%2F", "queue": "orders"}


def test_defaults() -> None:
    assert parse_options(REQUIRED) == LavinOptions(uri=REQUIRED["uri"], queue="orders")


def test_keys_are_case_insensitive_and_values_are_parsed() -> None:
    options = parse_options(
        {
            **REQUIRED,
            "STARTINGOFFSETS": "Latest",
            "endingOffsets": "5000",
            "maxRecordsPerTrigger": "300",
            "numpartitions": "4",
            "minRecordsPerPartition": "10",
            "prefetch": "250",
            "failOnDataLoss": "FALSE",
            "readTimeoutMs": "1500",
        }
    )
    assert options == LavinOptions(
        uri=REQUIRED["uri"],
        queue="orders",
        starting_offsets="latest",
        ending_offsets=5000,
        max_records_per_trigger=300,
        num_partitions=4,
        min_records_per_partition=10,
        prefetch=250,
        fail_on_data_loss=False,
        read_timeout_ms=1500,
    )
    assert options.read_timeout == 1.5


def test_a_numeric_starting_offset() -> None:
    assert parse_options({**REQUIRED, "startingOffsets": "17"}).starting_offsets == 17


@pytest.mark.parametrize("missing", ["uri", "queue"])
def test_required_options(missing: str) -> None:
    options = {key: value for key, value in REQUIRED.items() if key != missing}
    with pytest.raises(OptionError, match=f"option '{missing}' is required"):
        parse_options(options)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("startingOffsets", "first", "earliest | latest | an offset"),
        ("startingOffsets", "-1", "must not be negative"),
        ("endingOffsets", "earliest", "must be latest | an offset"),
        ("maxRecordsPerTrigger", "0", "at least 1"),
        ("numPartitions", "two", "must be an integer"),
        ("prefetch", "0", "at least 1"),
        ("failOnDataLoss", "yes", "true or false"),
    ],
)
def test_bad_values_name_the_option(name: str, value: str, message: str) -> None:
    with pytest.raises(OptionError, match=f"'{name}'.*{message}"):
        parse_options({**REQUIRED, name: value})

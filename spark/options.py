"""The data source's options, parsed and checked once.

Spark hands options over as a case-insensitive mapping of strings whose keys are stored
lower-cased, so every key is looked up in lower case here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, cast

StartSpec = Literal["earliest", "latest"] | int
EndSpec = Literal["latest"] | int

DEFAULT_PREFETCH = 1000
DEFAULT_MIN_RECORDS_PER_PARTITION = 1000
DEFAULT_READ_TIMEOUT_MS = 30_000
READ_FROM_FOLLOWER = "read_from_follower"  # the client property a cluster follower reads


class OptionError(ValueError):
    """An option is missing or has a value the data source cannot use."""


@dataclass(frozen=True)
class LavinOptions:
    uri: str
    queue: str
    starting_offsets: StartSpec = "earliest"
    ending_offsets: EndSpec = "latest"
    max_records_per_trigger: int | None = None
    num_partitions: int = 1
    min_records_per_partition: int = DEFAULT_MIN_RECORDS_PER_PARTITION
    prefetch: int = DEFAULT_PREFETCH
    fail_on_data_loss: bool = True
    read_timeout_ms: int = DEFAULT_READ_TIMEOUT_MS
    read_from_follower: bool = False

    @property
    def read_timeout(self) -> float:
        return self.read_timeout_ms / 1000

    @property
    def client_properties(self) -> dict[str, object]:
        """What the connections announce: a cluster follower serves the reads itself when asked
        (`readFromFollower`); a leader, or a single broker, ignores it."""
        return {READ_FROM_FOLLOWER: True} if self.read_from_follower else {}


def parse_options(raw: Mapping[str, str]) -> LavinOptions:
    options = {key.lower(): value for key, value in raw.items()}
    max_records = options.get("maxrecordspertrigger")
    return LavinOptions(
        uri=_required(options, "uri"),
        queue=_required(options, "queue"),
        starting_offsets=cast(StartSpec, _offset_spec(options, "startingOffsets", ("earliest", "latest"), "earliest")),
        ending_offsets=cast(EndSpec, _offset_spec(options, "endingOffsets", ("latest",), "latest")),
        max_records_per_trigger=(None if max_records is None else _positive_int("maxRecordsPerTrigger", max_records)),
        num_partitions=_positive_int("numPartitions", options.get("numpartitions", "1")),
        min_records_per_partition=_positive_int(
            "minRecordsPerPartition",
            options.get("minrecordsperpartition", str(DEFAULT_MIN_RECORDS_PER_PARTITION)),
        ),
        prefetch=_positive_int("prefetch", options.get("prefetch", str(DEFAULT_PREFETCH))),
        fail_on_data_loss=_boolean("failOnDataLoss", options.get("failondataloss", "true")),
        read_timeout_ms=_positive_int("readTimeoutMs", options.get("readtimeoutms", str(DEFAULT_READ_TIMEOUT_MS))),
        read_from_follower=_boolean("readFromFollower", options.get("readfromfollower", "false")),
    )


def _required(options: Mapping[str, str], name: str) -> str:
    value = options.get(name.lower(), "").strip()
    if not value:
        raise OptionError(f"option {name!r} is required")
    return value


def _offset_spec(options: Mapping[str, str], name: str, keywords: tuple[str, ...], default: str) -> str | int:
    value = options.get(name.lower(), default).strip()
    if value.lower() in keywords:
        return value.lower()
    try:
        offset = int(value)
    except ValueError:
        allowed = " | ".join(keywords)
        raise OptionError(f"option {name!r} must be {allowed} | an offset, not {value!r}") from None
    if offset < 0:
        raise OptionError(f"option {name!r} must not be negative, got {offset}")
    return offset


def _positive_int(name: str, value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise OptionError(f"option {name!r} must be an integer, not {value!r}") from None
    if number < 1:
        raise OptionError(f"option {name!r} must be at least 1, got {number}")
    return number


def _boolean(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise OptionError(f"option {name!r} must be true or false, not {value!r}")
    return lowered == "true"

"""A Spark batch read served by a cluster follower (`readFromFollower=true`): every row of
the stream, and the follower's read sessions served it, not the leader."""

from __future__ import annotations

import pytest
from clustering.cluster import Cluster
from clustering.test_follower_reads import (  # noqa: F401 - the module's cluster and stream, used as fixtures by name
    cluster,
    follower_of,
    read_sessions,
    stream,
)
from pyspark.sql import SparkSession

pytestmark = pytest.mark.timeout(180)


def test_a_batch_read_through_a_follower_returns_every_row(
    spark: SparkSession,
    cluster: Cluster,  # noqa: F811 - the fixture imported above
    stream: list[bytes],  # noqa: F811 - the fixture imported above
) -> None:
    follower = follower_of(cluster)
    served_before = read_sessions(follower)
    frame = (
        spark.read.format("lavin")
        .option("uri", f"amqp://guest:guest@127.0.0.1:{follower.port}/%2F")
        .option("queue", "exports")
        .option("readFromFollower", "true")
        .option("numPartitions", "2")
        .option("minRecordsPerPartition", "10")
        .load()
    )
    rows = frame.select("offset", "body").orderBy("offset").collect()
    assert [bytes(row.body) for row in rows][: len(stream)] == stream
    offsets = [row.offset for row in rows]
    assert offsets == list(range(offsets[0], offsets[0] + len(rows)))
    assert read_sessions(follower) >= served_before + 3  # the bounds, and each partition's read

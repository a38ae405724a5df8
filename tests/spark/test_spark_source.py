"""The lavin data source in a real local SparkSession against a real broker.

No test here registers the source (but the one for `register`): Spark has to find
pyspark_lavin by itself.
"""

from __future__ import annotations

import datetime
import itertools
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pika
import pytest
from broker_process import BrokerProcess
from helpers import Session, open_session, wait_until
from local_spark import submit_arguments
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamReader
from pyspark_lavin import register
from pyspark_lavin.offsets import StreamBounds
from pyspark_lavin.stream_info import fetch_stream_bounds

pytestmark = pytest.mark.timeout(300)

SENT_AT = datetime.datetime(2024, 5, 1, 12, 30, tzinfo=datetime.UTC)


@dataclass
class Stream:
    url: str
    queue: str
    session: Session
    published: int = 0

    def publish(self, count: int) -> None:
        """Messages numbered in publishing order: body b"message-<n>", message_id "id-<n>"."""
        tail = self.bounds().next
        for number in range(self.published, self.published + count):
            properties = pika.BasicProperties(
                message_id=f"id-{number}",
                timestamp=int(SENT_AT.timestamp()),
                delivery_mode=2,
                headers={"number": number, "parity": "even" if number % 2 == 0 else "odd"},
            )
            body = f"message-{number}".encode()
            self.session.channel.basic_publish("", self.queue, body, properties)
        wait_until(lambda: self.bounds().next == tail + count, f"{count} more messages are stored")
        self.published += count

    def bounds(self) -> StreamBounds:
        return fetch_stream_bounds(self.url, self.queue, timeout=5)

    @property
    def base(self) -> int:
        """The offset of message 0."""
        return self.bounds().next - self.published

    def read(self, spark: SparkSession) -> DataStreamReader:
        return spark.readStream.format("lavin").option("uri", self.url).option("queue", self.queue)


@pytest.fixture
def make_stream(broker: BrokerProcess) -> Iterator[Callable[..., Stream]]:
    """Declare stream queues with extra arguments; they are deleted after the test."""
    with open_session(broker.url) as session:

        def make(**arguments: object) -> Stream:
            queue = session.declare_queue("spark", durable=True, arguments={"x-queue-type": "stream", **arguments})
            return Stream(broker.url, queue, session)

        yield make


@pytest.fixture
def stream(make_stream: Callable[..., Stream]) -> Stream:
    return make_stream()


def offsets_of(frame: DataFrame) -> list[int]:
    return [row.offset for row in frame.select("offset").orderBy("offset").collect()]


def test_batch_read_of_a_range_split_across_tasks(spark: SparkSession, stream: Stream) -> None:
    stream.publish(1000)
    base = stream.base
    frame = (
        spark.read.format("lavin")
        .option("uri", stream.url)
        .option("queue", stream.queue)
        .option("startingOffsets", base + 100)
        .option("endingOffsets", base + 900)
        .option("numPartitions", 2)
        .option("minRecordsPerPartition", 1)
        .load()
    )
    assert frame.rdd.getNumPartitions() == 2
    rows = frame.orderBy("offset").collect()
    assert [row.offset for row in rows] == list(range(base + 100, base + 900))
    row = rows[1]
    assert row.body == b"message-101"
    assert (row.exchange, row.routing_key) == ("", stream.queue)
    assert row.headers == {"number": "101", "parity": "odd"}
    assert row.timestamp == SENT_AT.replace(tzinfo=None)  # the session shows UTC, naive
    assert row.properties.message_id == "id-101"
    assert row.properties.delivery_mode == 2
    assert row.properties.content_type is None


def test_a_batch_read_defaults_to_the_whole_stream_and_register_works(spark: SparkSession, stream: Stream) -> None:
    stream.publish(50)
    register(spark)
    frame = spark.read.format("lavin").option("uri", stream.url).option("queue", stream.queue)
    base = stream.base
    assert offsets_of(frame.load()) == list(range(base, base + 50))


def test_reading_a_queue_that_is_not_a_stream_fails_with_the_brokers_reason(
    spark: SparkSession, broker: BrokerProcess
) -> None:
    with open_session(broker.url) as session:
        queue = session.declare_queue("classic")
        frame = spark.read.format("lavin").option("uri", broker.url).option("queue", queue).load()
        with pytest.raises(PySparkException, match=f"queue '{queue}' .* is not a stream"):
            frame.collect()


def test_a_start_dropped_by_retention_fails_clearly_unless_allowed(
    spark: SparkSession, make_stream: Callable[..., Stream]
) -> None:
    # Segments of three or four messages, ten messages kept at most.
    stream = make_stream(**{"x-stream-max-segment-size-bytes": 200, "x-max-length": 10})
    stream.publish(40)
    base, first = stream.base, stream.bounds().first
    reader = (
        spark.read.format("lavin")
        .option("uri", stream.url)
        .option("queue", stream.queue)
        .option("startingOffsets", base)
    )
    with pytest.raises(PySparkException, match=f"offsets {base}..{first - 1} .* failOnDataLoss"):
        reader.load().collect()
    assert offsets_of(reader.option("failOnDataLoss", "false").load()) == list(range(first, base + 40))


def test_available_now_honours_max_records_per_trigger_and_resumes(
    spark: SparkSession, stream: Stream, tmp_path: Path
) -> None:
    def run_once() -> list[int]:
        query = (
            stream.read(spark)
            .option("maxRecordsPerTrigger", 300)
            .load()
            .writeStream.format("parquet")
            .option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        return [progress["numInputRows"] for progress in query.recentProgress]

    stream.publish(700)
    assert run_once() == [300, 300, 100]
    stream.publish(250)
    assert run_once() == [250]
    base = stream.base
    assert offsets_of(spark.read.parquet(str(tmp_path / "out"))) == list(range(base, base + 950))


def test_a_query_killed_mid_way_restarts_from_its_checkpoint_exactly_once(
    spark: SparkSession, spark_env: dict[str, str], stream: Stream, tmp_path: Path
) -> None:
    output, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    command = [
        sys.executable, "-m", "pyspark_lavin.example_pipeline",
        "--uri", stream.url, "--queue", stream.queue,
        "--output", str(output), "--checkpoint", str(checkpoint),
        "--max-records-per-trigger", "200", "--available-now",
    ]  # fmt: skip
    env = {**os.environ, **spark_env, "PYSPARK_SUBMIT_ARGS": submit_arguments()}
    stream.publish(2000)

    log_path = tmp_path / "killed-run.log"
    # A new session, so that SIGKILL takes the pipeline's JVM and Python workers down too.
    with log_path.open("wb") as log:
        pipeline = subprocess.Popen(command, env=env, start_new_session=True, stdout=log,
                                    stderr=subprocess.STDOUT)  # fmt: skip
    try:
        wait_for_committed_batches(checkpoint, 2, pipeline, log_path)
    finally:
        os.killpg(pipeline.pid, signal.SIGKILL)
        pipeline.wait()
    committed = len(list((checkpoint / "commits").glob("[0-9]*")))
    assert committed < 10, "the pipeline finished before it could be killed"

    stream.publish(300)
    rerun = subprocess.run(command, env=env, capture_output=True, timeout=240, check=False)
    assert rerun.returncode == 0, rerun.stderr.decode(errors="replace")[-3000:]

    offsets = offsets_of(spark.read.parquet(str(output)))
    base = stream.base
    assert offsets == list(range(base, base + 2300))
    # The rerun says what each batch wrote: batches of at most 200, one after the other, to the end.
    batches = re.findall(r"^batch \d+: (\d+) rows, offsets (\d+)\.\.(\d+)$", rerun.stdout.decode(), re.MULTILINE)
    assert batches, rerun.stdout.decode()[-3000:]
    ranges = [(int(first), int(last)) for rows, first, last in batches if int(rows) == int(last) - int(first) + 1]
    assert len(ranges) == len(batches), batches
    assert all(last - first < 200 for first, last in ranges), ranges
    assert all(after[0] == before[1] + 1 for before, after in itertools.pairwise(ranges)), ranges
    assert ranges[-1][1] == base + 2299, ranges


def wait_for_committed_batches(
    checkpoint: Path,
    count: int,
    pipeline: subprocess.Popen[bytes],
    log_path: Path,
    timeout: float = 180,
) -> None:
    deadline = time.monotonic() + timeout
    while len(list((checkpoint / "commits").glob("[0-9]*"))) < count:
        if pipeline.poll() is not None:
            output = log_path.read_text(errors="replace")[-3000:]
            raise AssertionError(f"the pipeline exited with {pipeline.returncode}:\n{output}")
        if time.monotonic() > deadline:
            raise AssertionError(f"fewer than {count} batches committed after {timeout} s")
        time.sleep(0.1)

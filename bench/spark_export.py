"""Export rate of the Spark source: `python bench/spark_export.py [--messages N]`.

Fills a stream queue with N messages of --body-size bytes, then times Spark reading all of
them, as a batch and as an availableNow stream, into the `noop` sink (so the numbers are
the source's, not a file format's) and into Parquet. Starts its own broker unless --uri
names one. Needs the `spark` extra, Java 17+ and pika.
"""

from __future__ import annotations

import argparse
import itertools
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import pika
import pyspark_lavin
from lavin.client.wire import connect
from pyspark.sql import SparkSession
from pyspark_lavin.stream_info import fetch_stream_bounds

PUBLISH_BATCH = 10_000


@contextmanager
def local_broker(data_dir: Path) -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "lavin", "serve", "--data-dir", str(data_dir),
               "--bind", "127.0.0.1", "--amqp-port", str(port),
               "--http-port", "-1", "--metrics-http-port", "-1"]  # fmt: skip
    broker = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or broker.poll() is not None:
                    raise RuntimeError("the broker did not start") from None
                time.sleep(0.05)
        yield f"amqp://guest:guest@127.0.0.1:{port}/%2F"
    finally:
        broker.terminate()
        broker.wait(30)


def fill_stream(uri: str, queue: str, messages: int, body_size: int) -> float:
    """Declare the stream, publish, and wait until the broker holds everything; return s."""
    connection = pika.BlockingConnection(pika.URLParameters(uri))
    connection.channel().queue_declare(queue, durable=True, arguments={"x-queue-type": "stream"})
    connection.close()
    body = b"x" * body_size
    started = time.perf_counter()
    with connect(uri, timeout=60) as client:
        for start in range(0, messages, PUBLISH_BATCH):
            client.publish(queue, [body] * min(PUBLISH_BATCH, messages - start))
    while stored(uri, queue) < messages:
        time.sleep(0.05)
    return time.perf_counter() - started


def stored(uri: str, queue: str) -> int:
    bounds = fetch_stream_bounds(uri, queue, timeout=10)
    return bounds.next - bounds.first


def local_session() -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    pyspark_lavin.register(spark)
    return spark


def export(spark: SparkSession, mode: str, sink: str, options: dict[str, str], scratch: Path) -> float:
    """Read the whole stream into `sink`; return the seconds it took."""
    started = time.perf_counter()
    if mode == "batch":
        writer = spark.read.format("lavin").options(**options).load().write.format(sink)
        writer.mode("overwrite").save(str(scratch / "out") if sink == "parquet" else None)
    else:
        stream_writer = (
            spark.readStream.format("lavin").options(**options).load()
            .writeStream.format(sink).option("checkpointLocation", str(scratch / "checkpoint"))
        )  # fmt: skip
        if sink == "parquet":
            stream_writer = stream_writer.option("path", str(scratch / "out"))
        stream_writer.trigger(availableNow=True).start().awaitTermination()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--body-size", type=int, default=100)
    parser.add_argument("--partitions", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--max-records-per-trigger", type=int, default=250_000)
    parser.add_argument("--uri", help="use this broker instead of starting one")
    arguments = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="spark-export-") as scratch_name:
        scratch = Path(scratch_name)
        broker = local_broker(scratch / "broker") if arguments.uri is None else nullcontext(arguments.uri)
        with broker as uri:
            queue = f"spark-export-{os.getpid()}"
            seconds = fill_stream(uri, queue, arguments.messages, arguments.body_size)
            print(f"published {arguments.messages} x {arguments.body_size} B"
                  f" in {seconds:.1f} s ({arguments.messages / seconds:,.0f} msg/s)")  # fmt: skip
            spark = local_session()
            # The first query of a session pays for starting Python workers: keep it out.
            warm_up = {"uri": uri, "queue": queue,
                       "endingOffsets": str(fetch_stream_bounds(uri, queue, 10).first + 10_000)}  # fmt: skip
            export(spark, "batch", "noop", warm_up, scratch / "warm-up")
            runs = itertools.product(("batch", "stream"), ("noop", "parquet"), arguments.partitions)
            for number, (mode, sink, partitions) in enumerate(runs):
                options = {"uri": uri, "queue": queue, "numPartitions": str(partitions),
                           "minRecordsPerPartition": "1",
                           "maxRecordsPerTrigger": str(arguments.max_records_per_trigger)}  # fmt: skip
                seconds = export(spark, mode, sink, options, scratch / f"run-{number}")
                print(f"{mode:6} -> {sink:7} numPartitions={partitions}:"
                      f" {arguments.messages / seconds:>10,.0f} rows/s ({seconds:.1f} s)")  # fmt: skip
            spark.stop()


if __name__ == "__main__":
    main()

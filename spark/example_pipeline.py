"""Example pipeline: copy a stream queue into Parquet files, resumably.

    python -m pyspark_lavin.example_pipeline --uri amqp://guest:guest@localhost:5672/%2F \\
        --queue orders --output /data/orders --checkpoint /data/orders.checkpoint --available-now

Run it again with the same checkpoint and it carries on where the last run stopped, even
after a crash: every stream offset lands in the output exactly once. Read the output with
Spark, which skips the files of unfinished micro-batches through the sink's
`_spark_metadata` log; plain Parquet readers would see those too.

Each micro-batch prints one line: `batch 3: 200 rows, offsets 600..799`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

import pyspark_lavin
from pyspark.sql import SparkSession
from pyspark.sql.streaming.listener import StreamingQueryProgress
from pyspark.sql.streaming.query import StreamingQuery

REPORT_INTERVAL_SECONDS = 1.0  # how often a running query's new batches are printed


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--uri", required=True, help="amqp://user:password@host:port/vhost")
    parser.add_argument("--queue", required=True, help="the stream queue to read")
    parser.add_argument("--output", required=True, help="directory of the Parquet files")
    parser.add_argument("--checkpoint", required=True, help="Spark's checkpoint directory")
    parser.add_argument(
        "--starting-offsets", default="earliest",
        help="earliest | latest | an offset; used only when the checkpoint is new",
    )  # fmt: skip
    parser.add_argument("--max-records-per-trigger", type=int, help="rows per micro-batch at most")
    trigger = parser.add_mutually_exclusive_group()
    trigger.add_argument(
        "--available-now", action="store_true",
        help="copy what the stream holds now, then stop",
    )  # fmt: skip
    trigger.add_argument(
        "--interval", default="30 seconds",
        help="keep running, starting a micro-batch this often (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument("--master", help="Spark master when not run through spark-submit")
    return parser.parse_args(argv)


def start_pipeline(spark: SparkSession, arguments: argparse.Namespace) -> StreamingQuery:
    reader = (
        spark.readStream.format("lavin")
        .option("uri", arguments.uri)
        .option("queue", arguments.queue)
        .option("startingOffsets", arguments.starting_offsets)
    )
    if arguments.max_records_per_trigger is not None:
        reader = reader.option("maxRecordsPerTrigger", arguments.max_records_per_trigger)
    writer = (
        reader.load()
        .writeStream.format("parquet")
        .option("path", arguments.output)
        .option("checkpointLocation", arguments.checkpoint)
    )
    if arguments.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=arguments.interval)
    return writer.start()


def await_reporting_batches(query: StreamingQuery) -> None:
    """Wait for the query to end, printing each micro-batch that read rows once it completes.
    Polled, not a listener: a listener's last events may still be queued when the query ends."""
    printed = -1
    while True:
        finished = query.awaitTermination(REPORT_INTERVAL_SECONDS)
        for progress in query.recentProgress:
            if progress.batchId > printed and progress.numInputRows > 0:
                print(batch_line(progress), flush=True)
                printed = progress.batchId
        if finished:
            return


def batch_line(progress: StreamingQueryProgress) -> str:
    """`batch N: R rows, offsets FIRST..LAST`: a source offset is the next stream offset to
    read, so a batch covers [its start, its end). A query's first batch may have no start offset."""
    rows = progress.numInputRows
    [source] = progress.sources
    end = json.loads(source.endOffset)["offset"]
    # Absent, or JSON `null` (a query restarted from its checkpoint may say so).
    start_offset = json.loads(source.startOffset) if source.startOffset else None
    start = start_offset["offset"] if start_offset else end - rows
    return f"batch {progress.batchId}: {rows} rows, offsets {start}..{end - 1}"


def main(argv: Sequence[str] | None = None) -> None:
    arguments = parse_arguments(argv)
    builder = SparkSession.builder.appName(f"lavin-{arguments.queue}-to-parquet")
    if arguments.master:
        builder = builder.master(arguments.master)
    spark = builder.getOrCreate()
    # Spark finds the source by itself after a regular install; an editable one hides it.
    pyspark_lavin.register(spark)
    await_reporting_batches(start_pipeline(spark, arguments))


if __name__ == "__main__":
    main()

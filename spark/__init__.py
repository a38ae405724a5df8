"""Read Lavin stream queues with Apache Spark: `spark.read.format("lavin")` and
`spark.readStream.format("lavin")`.

Spark finds this module on its own: on the first data-source call it imports every
top-level module whose name starts with `pyspark_` and registers its `DefaultSource`.
A failing import here would hide every such source from Spark, so this module imports
only the standard library and pyspark; the readers load the rest when Spark asks for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DefaultSource", "register"]


class DefaultSource(DataSource):
    """The `lavin` data source; options are described in docs/spark.md."""

    @classmethod
    def name(cls) -> str:
        return "lavin"

    def schema(self) -> StructType:
        from pyspark_lavin.schema import ROW_SCHEMA

        return ROW_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        from pyspark_lavin.batch_reader import LavinBatchReader
        from pyspark_lavin.options import parse_options
        from pyspark_lavin.schema import check_schema

        check_schema(schema)
        return LavinBatchReader(parse_options(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from pyspark_lavin.options import parse_options
        from pyspark_lavin.schema import check_schema
        from pyspark_lavin.stream_reader import LavinStreamReader

        check_schema(schema)
        return LavinStreamReader(parse_options(self.options), schema)


def register(spark: SparkSession) -> None:
    """Register the source by hand, where Spark's automatic lookup cannot see this module
    (a worker interpreter other than the one it is installed in, or an editable install)."""
    spark.dataSource.register(DefaultSource)

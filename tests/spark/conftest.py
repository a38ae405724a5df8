"""One SparkSession for all Spark tests: starting one costs seconds, each query about one."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from local_spark import CONF, spark_environment
from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    if shutil.which("java") is None:
        pytest.skip("Spark needs Java 17 or later, and `java` is not on PATH")
    return spark_environment(tmp_path_factory.mktemp("spark-python-path"))


@pytest.fixture(scope="session")
def spark(spark_env: dict[str, str]) -> Iterator[SparkSession]:
    with pytest.MonkeyPatch.context() as patch:
        for name, value in spark_env.items():
            patch.setenv(name, value)
        builder = SparkSession.builder.appName("lavin-tests")
        for key, value in CONF.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        session.sparkContext.setLogLevel("ERROR")
        yield session
        session.stop()

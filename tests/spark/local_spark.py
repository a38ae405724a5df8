"""How the tests start Spark: local, loopback only, workers on this interpreter."""

from __future__ import annotations

import os
import pkgutil
import sys
from pathlib import Path

import pyspark_lavin

CONF = {
    "spark.master": "local[2]",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "1",
    "spark.default.parallelism": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.memory": "512m",
}


def spark_environment(scratch: Path) -> dict[str, str]:
    """Variables the JVM and its Python workers inherit from the process that starts them."""
    env = {
        # Spark's workers would otherwise run `python3` from PATH, which lacks pyspark_lavin.
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    if not any(module.name == "pyspark_lavin" for module in pkgutil.iter_modules()):
        # An editable install serves pyspark_lavin through an import hook that Spark's
        # lookup (pkgutil.iter_modules) cannot list; give the workers a path entry that
        # holds the package under its own name, as a regular install does.
        link = scratch / "pyspark_lavin"
        link.symlink_to(Path(pyspark_lavin.__file__).parent, target_is_directory=True)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(scratch), os.environ.get("PYTHONPATH")]))
    return env


def submit_arguments() -> str:
    """The same configuration for a separate driver process (PYSPARK_SUBMIT_ARGS)."""
    confs = " ".join(f"--conf {key}={value}" for key, value in CONF.items() if key != "spark.master")
    return f"--master {CONF['spark.master']} {confs} pyspark-shell"

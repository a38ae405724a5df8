"""Installing Lavin as a new user would, from a fresh clone of the committed tree: `make
install` puts `lavin` on PATH, `make serve` says where the command is, and the wheel of
`make dist` installs into a fresh venv, serves, and brings the Spark extra's module.

Slow (a clone, an install, a wheel built with mypyc): it runs in `make test` (CI) and not
again in `make test-installed`. Uncommitted changes are not in the clone."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pika
import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
READY_TIMEOUT = 60.0
PORTS_0 = ("--bind", "127.0.0.1", "--amqp-port", "0", "--http-port", "0", "--metrics-http-port", "0")

pytestmark = [
    pytest.mark.timeout(900),
    pytest.mark.skipif(bool(os.environ.get("LAVIN_TEST_EXPECT_INSTALLED")), reason="run once, in `make test`"),
    pytest.mark.skipif(shutil.which("git") is None or shutil.which("make") is None, reason="needs git and make"),
    pytest.mark.skipif(not (REPO_ROOT / ".git").exists(), reason="not a git checkout"),
]


def system_env(**extra: str) -> dict[str, str]:
    """A shell of a new user: no venv of the test run on PATH, no LAVIN_* settings."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("LAVIN_", "VIRTUAL_ENV", "PYTHON"))}
    env["PATH"] = os.pathsep.join(
        part for part in env["PATH"].split(os.pathsep) if Path(part) != Path(sys.executable).parent
    )
    return {**env, **extra}


def run(command: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{command} exited with {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("fresh") / "lavin"
    run(["git", "clone", "--quiet", str(REPO_ROOT), str(target)], cwd=target.parent, env=system_env())
    return target


def wait_for_ports(ready_file: Path, process: subprocess.Popen[str]) -> dict[str, int]:
    deadline = time.monotonic() + READY_TIMEOUT
    while not ready_file.exists():
        assert process.poll() is None, f"the broker exited with {process.returncode}"
        assert time.monotonic() < deadline, f"no {ready_file} after {READY_TIMEOUT} s"
        time.sleep(0.1)
    return {listener["protocol"]: listener["port"] for listener in json.loads(ready_file.read_text())["listeners"]}


def stop(process: subprocess.Popen[str]) -> str:
    """SIGTERM to the process group (make and the broker it runs); what it printed."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
    output, _ = process.communicate(timeout=60)
    return output


def amqp_round_trip(port: int) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{port}/%2F"))
    try:
        channel = connection.channel()
        queue = channel.queue_declare("", exclusive=True).method.queue
        channel.basic_publish("", queue, b"installed")
        assert channel.basic_get(queue, auto_ack=True)[2] == b"installed"
    finally:
        connection.close()


def test_make_install_prints_how_to_get_lavin_on_path_and_make_serve_says_where_it_is(clone: Path) -> None:
    # Pure Python: the compiled install is what `make test-installed` and the wheel test check.
    env = system_env(LAVIN_PURE_PYTHON="1")
    output = run(["make", "install"], cwd=clone, env=env)
    assert "mypyc: about 100 s" in output, output
    activate = re.search(r"^\s+(\. \S+/bin/activate)$", output, re.MULTILINE)
    assert activate is not None, output
    assert shutil.which("lavin", path=env["PATH"]) is None, "lavin was on PATH before: the test proves nothing"
    found = run(["bash", "-c", f"{activate[1]} && command -v lavin && lavin --version"], cwd=clone.parent, env=env)
    assert found.splitlines()[0] == str(clone / ".venv-installed" / "bin" / "lavin"), found
    assert "lavin, version" in found, found

    ready_file = clone.parent / "serve-ready.json"
    args = " ".join([*PORTS_0, "--data-dir", str(clone.parent / "data"), "--ready-file", str(ready_file)])
    serving = subprocess.Popen(["make", "serve", f"ARGS={args}"], cwd=clone, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        amqp_round_trip(wait_for_ports(ready_file, serving)["amqp"])
    finally:
        output = stop(serving)
    assert f"the lavin command is {clone / '.venv-installed' / 'bin' / 'lavin'}" in output, output


def test_the_wheel_of_make_dist_installs_serves_and_brings_the_spark_module(clone: Path) -> None:
    env = system_env()
    run(["make", "dist"], cwd=clone, env=env, timeout=800)
    sdists, wheels = sorted((clone / "dist").glob("lavin-*.tar.gz")), sorted((clone / "dist").glob("lavin-*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, sorted((clone / "dist").iterdir())

    venv = clone.parent / "wheel-venv"
    run([sys.executable, "-m", "venv", str(venv)], cwd=clone.parent, env=env)
    run([str(venv / "bin" / "pip"), "install", "--quiet", f"{wheels[0]}[spark]"], cwd=clone.parent, env=env)
    spark = run([str(venv / "bin" / "python"), "-c", "import pyspark_lavin; print(pyspark_lavin.DefaultSource.name())"],
                cwd=clone.parent, env=env)  # fmt: skip
    assert spark.strip() == "lavin"

    ready_file = clone.parent / "wheel-ready.json"
    command = [str(venv / "bin" / "lavin"), "serve", *PORTS_0, "--data-dir", str(clone.parent / "wheel-data"),
               "--ready-file", str(ready_file)]  # fmt: skip
    serving = subprocess.Popen(command, cwd=clone.parent, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        amqp_round_trip(wait_for_ports(ready_file, serving)["amqp"])
    finally:
        output = stop(serving)
    assert serving.returncode == 0, output

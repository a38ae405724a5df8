"""The data dir is private to the broker's user: the `umask` setting (0027 by default) is set
before anything is created, so other local users can read no message body, definition or
socket; an existing data dir open to them gets a warning, not a chmod."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
import requests
from broker_process import BrokerFactory, BrokerProcess
from helpers import open_session
from lavin.config import Config, StartupError

UNPRIVILEGED = ("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups")
OPEN_DATA_DIR_WARNING = "other local users can read message bodies"


@pytest.fixture
def traversable_parent() -> Iterator[Path]:
    """A directory every user may enter, as /var/lib is: the data dir's mode alone then
    decides what other users see (pytest's own temporary directories are 0700)."""
    parent = Path(tempfile.mkdtemp(prefix="lavin-private-"))
    parent.chmod(0o755)
    yield parent
    shutil.rmtree(parent, ignore_errors=True)


def store_something(broker: BrokerProcess) -> None:
    """Persistent messages in a durable queue, and a policy: segments and metadata on disk."""
    with open_session(broker.url) as session:
        session.channel.confirm_delivery()
        queue = "private"  # not session.declare_queue's, which is deleted with the session
        session.channel.queue_declare(queue, durable=True)
        for index in range(3):
            session.channel.basic_publish("", queue, b"secret %d" % index, pika.BasicProperties(delivery_mode=2))
    policy = {"pattern": "^private", "definition": {"max-length": 100}, "apply-to": "queues"}
    reply = requests.put(
        f"{broker.http_url}/api/policies/%2F/private", json=policy, auth=("guest", "guest"), timeout=10
    )
    assert reply.status_code == 201, reply.text


def modes(data_dir: Path) -> dict[str, int]:
    """The permission bits of the data dir and of everything in it, by relative path."""
    found = {".": stat.S_IMODE(data_dir.stat().st_mode)}
    for path in data_dir.rglob("*"):
        found[str(path.relative_to(data_dir))] = stat.S_IMODE(path.lstat().st_mode)
    return found


def segment_files(data_dir: Path) -> list[Path]:
    return [path for path in data_dir.rglob("msgs.*") if path.is_file()]


def test_nothing_the_broker_writes_is_open_to_other_users(
    broker_factory: BrokerFactory, traversable_parent: Path
) -> None:
    broker = broker_factory(data_dir=traversable_parent / "data")
    store_something(broker)
    found = modes(broker.data_dir)
    assert found["."] == 0o750
    assert any(name.endswith(".sock") for name in found), "the control socket is in the data dir"
    assert segment_files(broker.data_dir), "the messages were written to segment files"
    open_to_others = {name: oct(mode) for name, mode in found.items() if mode & stat.S_IRWXO}
    assert open_to_others == {}
    assert OPEN_DATA_DIR_WARNING not in broker.output


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another user (nobody) needs root")
def test_another_local_user_cannot_read_a_segment(broker_factory: BrokerFactory, traversable_parent: Path) -> None:
    broker = broker_factory(data_dir=traversable_parent / "data")
    store_something(broker)
    segment = segment_files(broker.data_dir)[0]
    owner = subprocess.run(["cat", str(segment)], capture_output=True, check=False)
    assert owner.returncode == 0 and b"secret 0" in owner.stdout
    other = subprocess.run([*UNPRIVILEGED, "cat", str(segment)], capture_output=True, check=False)
    assert other.returncode != 0, "nobody read a segment file"
    assert b"Permission denied" in other.stderr


def test_the_umask_setting_is_honoured(broker_factory: BrokerFactory, traversable_parent: Path) -> None:
    broker = broker_factory(["--umask", "0077"], data_dir=traversable_parent / "data")
    store_something(broker)
    found = modes(broker.data_dir)
    assert found["."] == 0o700
    assert {name: oct(mode) for name, mode in found.items() if mode & 0o077} == {}


def test_an_existing_data_dir_open_to_others_gets_one_warning_and_keeps_its_mode(
    broker_factory: BrokerFactory, traversable_parent: Path
) -> None:
    data_dir = traversable_parent / "data"
    data_dir.mkdir()
    data_dir.chmod(0o755)
    broker = broker_factory(data_dir=data_dir)
    store_something(broker)
    warnings = [line for line in broker.output.splitlines() if OPEN_DATA_DIR_WARNING in line]
    assert len(warnings) == 1, warnings
    assert "0755" in warnings[0]
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o755
    # What the broker creates inside follows the umask all the same.
    assert all(not mode & stat.S_IRWXO for name, mode in modes(data_dir).items() if name != ".")


@pytest.mark.parametrize("mask", ["0999", "1000", "u=rwx", ""])
def test_a_umask_that_is_not_an_octal_mask_stops_start_up(mask: str) -> None:
    with pytest.raises(StartupError, match="umask must be an octal mask from 0000 to 0777, such as 0027"):
        Config(umask=mask)

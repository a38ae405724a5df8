"""Every key of the config file takes effect: each test sets keys in an INI file only and
watches what the broker does with them.

Keys covered elsewhere:
- `[amqp] port` and `heartbeat` (as pika takes it): test_cli.py::test_config_file_sets_port_and_heartbeat
- `[main] consumer_timeout`: test_consumer_timeout.py::test_the_setting_times_out_an_unacked_delivery
- `[main] plugins`: test_plugin_selection.py::test_config_file_enables_plugins
- `[plugin.NAME]`: test_plugin_selection.py::test_plugin_section_reaches_lavin_configure
- `[main] default_user`, `default_password`, `default_user_only_loopback`: test_users.py
- `[main] umask`: test_private_data.py
- `[amqp] max_unfinished_body_bytes`: test_unfinished_bodies.py
"""

from __future__ import annotations

import hashlib
import itertools
import re
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import click
import pika
import pytest
from broker_process import BrokerProcess, hermetic_env
from helpers import closes_channel, open_session
from lavin import cli as lavin_cli
from lavin.client.wire import PROTOCOL_HEADER, Connection, connect
from lavin.config import INI_KEYS, Config, StartupError
from pamqp import commands

REPO_ROOT = Path(__file__).resolve().parent.parent
SEGMENT_SIZE = 4096
FRAME_MAX = 8192
CHANNEL_MAX = 7
HEARTBEAT = 23
MAX_MESSAGE_SIZE = 2048
LIMITS_INI = f"""
[main]
segment_size = {SEGMENT_SIZE}
[amqp]
frame_max = {FRAME_MAX}
channel_max = {CHANNEL_MAX}
heartbeat = {HEARTBEAT}
max_message_size = {MAX_MESSAGE_SIZE}
"""


class ConfiguredBroker(BrokerProcess):
    """`lavin serve --config FILE` and nothing else but the ready file the fixture waits for:
    data dir, address, ports and log level come from the file, which names the same data
    dir as this object and port 0 for each listener: the ports are learnt from the ready file."""

    def __init__(self, tmp_path: Path, settings: str, *, host: str = "127.0.0.1", env: dict[str, str] | None = None):
        self.host = host
        super().__init__(tmp_path / "data", env=env)
        self.ini = tmp_path / "lavin.ini"
        self.ini.write_text(
            f"[main]\ndata_dir = {self.data_dir}\nmetrics_http_port = {self.metrics_port}\n"
            f"{textwrap.dedent(settings)}\n"
            # later sections of the same name add to the first
            f"[amqp]\nbind = {host}\nport = {self.port}\n"
            f"[mgmt]\nport = {self.http_port}\n"
        )

    @property
    def command(self) -> list[str]:
        return [sys.executable, "-m", "lavin", "serve", "--config", str(self.ini), "--ready-file", str(self.ready_path)]


StartConfigured = Callable[..., ConfiguredBroker]


@pytest.fixture
def configured(tmp_path: Path) -> Iterator[StartConfigured]:
    """Start a ConfiguredBroker from settings for [main]; stopped after the test."""
    started: list[ConfiguredBroker] = []

    def start(settings: str, *, host: str = "127.0.0.1", env: dict[str, str] | None = None) -> ConfiguredBroker:
        process = ConfiguredBroker(tmp_path, settings, host=host, env=env)
        started.append(process)
        process.start()
        return process

    yield start
    for process in started:
        process.stop()


@pytest.fixture(scope="module")
def limited_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker with the size and tune limits of LIMITS_INI."""
    directory = tmp_path_factory.mktemp("limits")
    ini = directory / "lavin.ini"
    ini.write_text(LIMITS_INI)
    process = BrokerProcess(directory / "data", extra_args=["--config", str(ini)])
    process.start()
    yield process
    process.stop()


def sha1(name: str) -> str:
    return hashlib.sha1(name.encode()).hexdigest()


# --- [main] segment_size ---------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param({}, id="classic"),
        pytest.param({"x-queue-type": "quorum"}, id="quorum"),
        pytest.param({"x-max-priority": 3}, id="priority"),
        pytest.param({"x-queue-type": "stream"}, id="stream"),
    ],
)
def test_segment_size_is_the_size_at_which_segment_files_roll(
    limited_broker: BrokerProcess, arguments: dict[str, object]
) -> None:
    body = b"x" * 1000  # three records fill a 4 KiB segment
    with open_session(limited_broker.url) as session:
        queue = session.declare_queue("segments", durable=True, arguments=arguments)
        session.channel.confirm_delivery()
        for _ in range(30):
            session.channel.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2))
        queue_dir = limited_broker.data_dir / sha1("/") / sha1(queue)
        sizes = sorted(path.stat().st_size for path in queue_dir.rglob("msgs.*"))
    assert len(sizes) >= 10, f"30 records of 1 KiB in segments of {SEGMENT_SIZE} bytes: {sizes}"
    assert sizes[-1] <= SEGMENT_SIZE


def test_a_stream_argument_still_sets_its_own_segment_size(limited_broker: BrokerProcess) -> None:
    with open_session(limited_broker.url) as session:
        arguments = {"x-queue-type": "stream", "x-stream-max-segment-size-bytes": 3 * SEGMENT_SIZE}
        queue = session.declare_queue("segments", durable=True, arguments=arguments)
        session.channel.confirm_delivery()
        for _ in range(30):
            session.channel.basic_publish("", queue, b"x" * 1000, pika.BasicProperties(delivery_mode=2))
        sizes = [path.stat().st_size for path in (limited_broker.data_dir / sha1("/") / sha1(queue)).glob("msgs.*")]
    assert SEGMENT_SIZE < max(sizes) <= 3 * SEGMENT_SIZE


# --- [amqp] heartbeat, frame_max, channel_max, max_message_size --------------------------


def test_tune_offers_the_configured_heartbeat_frame_max_and_channel_max(limited_broker: BrokerProcess) -> None:
    with Connection(limited_broker.url) as connection:
        connection.send_raw(PROTOCOL_HEADER)
        connection.start_ok()
        tune = connection.expect(commands.Connection.Tune)
    assert (tune.heartbeat, tune.frame_max, tune.channel_max) == (HEARTBEAT, FRAME_MAX, CHANNEL_MAX)


def test_channel_max_limits_the_channels_a_client_opens(limited_broker: BrokerProcess) -> None:
    # A raw client: pika would refuse to ask for a channel beyond the limit itself.
    with connect(limited_broker.url, channels=range(1, CHANNEL_MAX + 1)) as connection:
        connection.send(commands.Channel.Open(), CHANNEL_MAX + 1)
        close = connection.expect_connection_close()
    opened = f"number of channels opened ({CHANNEL_MAX})"
    assert (close.reply_code, close.reply_text) == (
        530,
        f"NOT_ALLOWED - {opened} has reached the negotiated channel_max ({CHANNEL_MAX})",
    )


def test_max_message_size_refuses_a_larger_body(limited_broker: BrokerProcess) -> None:
    with open_session(limited_broker.url) as session:
        queue = session.declare_queue("sized")
        session.channel.confirm_delivery()
        session.channel.basic_publish("", queue, b"x" * MAX_MESSAGE_SIZE)  # the limit itself is allowed
        size, limit = MAX_MESSAGE_SIZE + 1, MAX_MESSAGE_SIZE
        with closes_channel(
            406, f"PRECONDITION_FAILED - message size {size} is larger than configured max size {limit}"
        ):
            session.channel.basic_publish("", queue, b"x" * (MAX_MESSAGE_SIZE + 1))


# --- [main] data_dir, log_level, default_vhost, auth_backends; [amqp] bind ---------------


def test_data_dir_holds_the_queues(configured: StartConfigured) -> None:
    broker = configured("")
    with open_session(broker.url) as session:
        queue = session.declare_queue("kept", durable=True)
        marker = broker.data_dir / sha1("/") / sha1(queue) / ".queue"
        assert marker.read_text() == queue


def test_bind_is_the_only_address_listened_on(configured: StartConfigured) -> None:
    broker = configured("", host="127.0.0.2")
    assert f"Listening on amqp://127.0.0.2:{broker.port}" in broker.output
    pika.BlockingConnection(pika.URLParameters(broker.url)).close()
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port, connection_attempts=1))


def test_log_level_drops_lower_levels(configured: StartConfigured) -> None:
    broker = configured("log_level = warn")
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(pika.URLParameters(broker.url.replace("guest:guest", "guest:wrong")))
    broker.stop()
    assert "WARNING lavin.broker.broker: login of user 'guest'" in broker.output
    assert re.search(r" (INFO|DEBUG) ", broker.output) is None, broker.output


def open_refusal(broker: BrokerProcess, vhost: str) -> tuple[int, str]:
    """The code and text of the connection.close that answers connection.open of `vhost`."""
    with Connection(broker.url) as connection:
        connection.send_raw(PROTOCOL_HEADER)
        connection.start_ok()
        connection.tune_ok(vhost=vhost)
        close = connection.expect_connection_close()
    return close.reply_code, close.reply_text


def test_default_vhost_is_the_vhost_created(configured: StartConfigured) -> None:
    broker = configured("default_vhost = staging")
    assert open_refusal(broker, "/") == (530, "NOT_ALLOWED - vhost / not found")
    # The default user gets its permissions on the default vhost, as in RabbitMQ.
    pika.BlockingConnection(pika.URLParameters(broker.url.replace("%2F", "staging"))).close()
    assert (broker.data_dir / sha1("staging") / ".vhost").read_text() == "staging"


CLERKS_MODULE = '''
from lavin.api import AccessRefused, AuthBackend, User, VHostPermissions


class Clerks(AuthBackend):
    """Knows the user clerk, and turns guest away."""

    name = "clerks"

    async def authenticate(self, username, password, peer_host):
        if username == "guest":
            raise AccessRefused("no guests here")
        if (username, password) == ("clerk", "desk"):
            return User("clerk", permissions={"/": VHostPermissions()})
        return None
'''


def install_clerks(directory: Path) -> dict[str, str]:
    """An auth backend `clerks`, installed by a dist-info on the broker's PYTHONPATH only."""
    directory.mkdir()
    (directory / "lavin_test_clerks.py").write_text(CLERKS_MODULE)
    dist_info = directory / "lavin_test_clerks-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: lavin-test-clerks\nVersion: 1.0\n")
    (dist_info / "entry_points.txt").write_text("[lavin.auth]\nclerks = lavin_test_clerks:Clerks\n")
    return {**hermetic_env(), "PYTHONPATH": str(directory)}


def test_auth_backends_are_asked_in_the_configured_order(tmp_path: Path, configured: StartConfigured) -> None:
    env = install_clerks(tmp_path / "plugin-path")
    broker = configured("plugins = clerks\nauth_backends = clerks, guest", env=env)
    pika.BlockingConnection(pika.URLParameters(broker.url.replace("guest:guest", "clerk:desk"))).close()
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):  # clerks, asked first, refuses guest
        pika.BlockingConnection(pika.URLParameters(broker.url))
    assert "login of user 'guest' from 127.0.0.1 refused: no guests here" in broker.output


# --- the documented keys are the keys -----------------------------------------------------


SETTINGS_HEADER = "| section | key | flag | env var | default | meaning |"
NOT_SET_THERE = "—"  # the cell of a column the setting has no entry in


class SettingRow(NamedTuple):
    ini_key: tuple[str, str] | None
    flag: str | None
    env_var: str | None
    default: str


def settings_table() -> list[SettingRow]:
    """The rows of the table of every setting in docs/configuration.md."""
    lines = (REPO_ROOT / "docs" / "configuration.md").read_text().splitlines()
    start = lines.index(SETTINGS_HEADER) + 2  # after the header and its |---| line
    rows = []
    for line in itertools.takewhile(lambda line: line.startswith("|"), lines[start:]):
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
        section, key, flag, env_var, default = (None if cell == NOT_SET_THERE else cell for cell in cells[:5])
        ini_key = None
        if section is not None and key is not None:
            ini_key = (section.strip("`[]"), key.strip("`"))
        # `--data-dir DIR` -> --data-dir
        rows.append(SettingRow(ini_key, flag and flag.strip("`").split()[0], env_var and env_var.strip("`"), default))
    return rows


def serve_options() -> list[click.Option]:
    return [param for param in lavin_cli.serve.params if isinstance(param, click.Option) and param.name != "help"]


def test_the_settings_table_lists_exactly_the_keys_the_loader_reads() -> None:
    documented = [row.ini_key for row in settings_table() if row.ini_key is not None]
    assert sorted(documented) == sorted(INI_KEYS)


def test_the_settings_table_lists_every_serve_flag_with_its_env_var_and_key() -> None:
    rows = {row.flag: row for row in settings_table() if row.flag is not None}
    options = {option.opts[0]: option for option in serve_options()}
    assert sorted(rows) == sorted(options)
    fields_by_key = {key: field_name for key, (field_name, _) in INI_KEYS.items()}
    for flag, option in options.items():
        row = rows[flag]
        assert row.env_var == option.envvar, flag
        # the key on the flag's row sets the same Config field as the flag
        assert (fields_by_key[row.ini_key] if row.ini_key else None) == (
            option.name if option.name in fields_by_key.values() else None
        ), flag


def test_the_settings_table_shows_the_defaults_in_force() -> None:
    fields_by_key = {key: field_name for key, (field_name, _) in INI_KEYS.items()}
    defaults = Config()
    for row in settings_table():
        if row.ini_key is None:
            continue
        value = getattr(defaults, fields_by_key[row.ini_key])
        if isinstance(value, bool):
            assert row.default == f"`{str(value).lower()}`", row
        elif isinstance(value, int | float) or (isinstance(value, str) and value):
            assert row.default.startswith(f"`{value}`"), row


def test_the_readme_flags_are_serve_flags_with_their_env_vars() -> None:
    lines = (REPO_ROOT / "README.md").read_text().splitlines()
    start = lines.index("| flag | env var | default |") + 2
    options = {option.opts[0]: option for option in serve_options()}
    rows = list(itertools.takewhile(lambda line: line.startswith("|"), lines[start:]))
    assert rows
    for row in rows:
        flag_cell, env_var_cell = row.split(" | ")[:2]
        flags, env_vars = re.findall(r"--[a-z-]+", flag_cell), re.findall(r"LAVIN_[A-Z_]+", env_var_cell)
        assert flags and [options[flag].envvar for flag in flags] == env_vars, row


def test_the_readme_example_uses_keys_the_loader_reads() -> None:
    readme_example = (REPO_ROOT / "README.md").read_text().partition("```ini")[2].partition("```")[0]
    section = ""
    for line in filter(None, map(str.strip, readme_example.splitlines())):
        if line.startswith("["):
            section = line.strip("[]")
        else:
            assert (section, line.partition("=")[0].strip()) in INI_KEYS, line


@pytest.mark.parametrize("size", [4095, 2**32 + 1])
def test_a_segment_size_no_store_can_use_stops_start_up(size: int) -> None:
    with pytest.raises(StartupError, match="segment_size must be between 4096 bytes and 4 GiB"):
        Config(segment_size=size)

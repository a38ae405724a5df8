"""Vhosts: created and deleted through the broker's access control, kept in vhosts.json and
started at start-up; their limits max-connections and max-queues, with RabbitMQ's texts."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pika
import pytest
from access_helpers import in_process_broker, open_refusal, read_json
from helpers import closes_channel, closes_connection, open_session, process_for, round_trip
from lavin.api import VHostPermissions
from lavin.broker.access.access_control import AccessControlError, NotFoundError
from lavin.config import StartupError

NO_LEDGER = "NOT_FOUND - no queue 'ledger' in vhost 'doomed'"


def vhost_dir(data_dir: Path, name: str) -> Path:
    return data_dir / hashlib.sha1(name.encode()).hexdigest()


def connection_limit_text(vhost: str, limit: int) -> str:
    return f"NOT_ALLOWED - access to vhost '{vhost}' refused for user 'guest': connection limit ({limit}) is reached"


def test_a_new_vhost_is_started_saved_given_to_its_creator_and_started_again(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with in_process_broker(data_dir) as lavin:
        access = lavin.broker.access
        lavin.call(access.add_user, "carol", "pw")
        lavin.call(access.add_vhost, "shop", "carol")
        assert (vhost_dir(data_dir, "shop") / ".vhost").read_text() == "shop"
        assert [entry["name"] for entry in read_json(data_dir / "vhosts.json")] == ["/", "shop"]
        assert lavin.call(access.user, "carol").permissions == {"shop": VHostPermissions()}
        with open_session(lavin.url("carol", "pw", "shop")) as session:
            session.channel.confirm_delivery()
            session.channel.queue_declare("orders", durable=True)
            session.channel.basic_publish("", "orders", b"kept", pika.BasicProperties(delivery_mode=2))
    with in_process_broker(data_dir) as lavin:
        assert lavin.call(lavin.broker.access.vhosts) == ["/", "shop"]
        with open_session(lavin.url("carol", "pw", "shop")) as session:
            assert session.channel.queue_declare("orders", passive=True).method.message_count == 1


def test_deleting_a_vhost_closes_its_connections_with_320_and_removes_its_data(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with in_process_broker(data_dir) as lavin:
        access = lavin.broker.access
        lavin.call(access.add_vhost, "doomed", "guest")
        lavin.call(access.add_user, "dora", "pw")
        lavin.call(access.set_permissions, "dora", "doomed", VHostPermissions())
        doomed = pika.BlockingConnection(pika.URLParameters(lavin.url(vhost="doomed")))
        channel = doomed.channel()
        channel.queue_declare("ledger", durable=True)
        channel.basic_publish("", "ledger", b"gone", pika.BasicProperties(delivery_mode=2))
        round_trip(channel)
        elsewhere = pika.BlockingConnection(pika.URLParameters(lavin.url()))

        lavin.wait(lambda: access.delete_vhost("doomed"))

        with closes_connection(320, "CONNECTION_FORCED - vhost 'doomed' is deleted"):
            process_for(doomed, 2.0)
        assert not vhost_dir(data_dir, "doomed").exists()
        assert list(data_dir.glob("*.deleted")) == []
        assert lavin.call(access.vhosts) == ["/"]
        assert lavin.call(access.permissions) == [("guest", "/", VHostPermissions())]
        assert [entry["name"] for entry in read_json(data_dir / "vhosts.json")] == ["/"]
        assert all("doomed" not in entry["permissions"] for entry in read_json(data_dir / "users.json"))
        assert open_refusal(lavin.url(vhost="doomed")) == (530, "NOT_ALLOWED - vhost doomed not found")
        round_trip(elsewhere.channel())  # other vhosts' connections carry on
        elsewhere.close()
        # A vhost of the same name starts empty.
        lavin.call(access.add_vhost, "doomed", "guest")
        with open_session(lavin.url(vhost="doomed")) as session, closes_channel(404, NO_LEDGER):
            session.channel.queue_declare("ledger", passive=True)
        lavin.wait(lambda: access.delete_vhost("doomed"))
    with in_process_broker(data_dir) as lavin:
        assert lavin.call(lavin.broker.access.vhosts) == ["/"]


def test_max_connections_refuses_connection_open_with_rabbitmqs_text(tmp_path: Path) -> None:
    with in_process_broker(tmp_path / "data") as lavin:
        access = lavin.broker.access
        lavin.call(access.set_vhost_limits, "/", {"max-connections": 1})
        first = pika.BlockingConnection(pika.URLParameters(lavin.url()))
        assert open_refusal(lavin.url()) == (530, connection_limit_text("/", 1))
        first.close()
        pika.BlockingConnection(pika.URLParameters(lavin.url())).close()  # its place is free again
        lavin.call(access.set_vhost_limits, "/", {"max-connections": 0})
        assert open_refusal(lavin.url()) == (530, connection_limit_text("/", 0))
        lavin.call(access.set_vhost_limits, "/", {"max-connections": -1})
        pika.BlockingConnection(pika.URLParameters(lavin.url())).close()
        assert lavin.call(access.vhost_limits, "/") == {}


def test_max_queues_refuses_queue_declare_with_rabbitmqs_text(tmp_path: Path) -> None:
    with in_process_broker(tmp_path / "data") as lavin:
        lavin.call(lavin.broker.access.set_vhost_limits, "/", {"max-queues": 2})
        with open_session(lavin.url()) as session:
            session.channel.queue_declare("first")
            session.channel.queue_declare("second", durable=True)
            session.channel.queue_declare("first")  # declaring one that exists is no new queue
            with closes_channel(
                406, "PRECONDITION_FAILED - cannot declare queue 'third': queue limit in vhost '/' (2) is reached"
            ):
                session.channel.queue_declare("third")


def test_limits_are_saved_and_limits_an_operator_writes_apply_at_start(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with in_process_broker(data_dir) as lavin:
        lavin.call(lavin.broker.access.set_vhost_limits, "/", {"max-queues": 5, "max-connections": -1})
    assert read_json(data_dir / "vhosts.json")[0]["limits"] == {"max-queues": 5}
    (data_dir / "vhosts.json").write_text(
        json.dumps([{"name": "/", "limits": {"max-connections": 0}}, {"name": "edited"}])
    )
    with in_process_broker(data_dir) as lavin:
        assert open_refusal(lavin.url()) == (530, connection_limit_text("/", 0))
        assert lavin.call(lavin.broker.access.vhosts) == ["/", "edited"]
        assert lavin.call(lavin.broker.access.vhost_limits, "/") == {"max-connections": 0}
    assert (vhost_dir(data_dir, "edited") / ".vhost").read_text() == "edited"


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        pytest.param("", "is not valid JSON", id="empty"),
        pytest.param('{"name": "/"}', "the file must be a list", id="not-a-list"),
        pytest.param("null", "the file must be a list", id="null"),
        pytest.param(
            '[{"name": "/", "limits": {"max-queues": "ten"}}]', "limit max-queues is not an integer", id="type"
        ),
        pytest.param('[{"name": "/", "limits": {"max-sessions": 1}}]', "unknown vhost limit 'max-sessions'", id="key"),
        pytest.param('[{"name": ""}]', "a vhost name must not be empty", id="name"),
    ],
)
def test_an_invalid_vhosts_json_stops_start_up_naming_the_file(tmp_path: Path, content: str, reason: str) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    vhosts_file = data_dir / "vhosts.json"
    vhosts_file.write_text(content)
    with pytest.raises(StartupError) as refused, in_process_broker(data_dir):
        pass
    assert str(vhosts_file) in str(refused.value)
    assert reason in str(refused.value)
    assert vhosts_file.read_text() == content


def test_access_control_refuses_bad_vhost_input(tmp_path: Path) -> None:
    with in_process_broker(tmp_path / "data") as lavin:
        access = lavin.broker.access
        refusals = {
            "vhost '/' already exists": (access.add_vhost, "/"),
            "a vhost name must not be empty": (access.add_vhost, ""),
            "a vhost name is at most 255 bytes": (access.add_vhost, "v" * 256),
            "no user 'nobody'": (access.add_vhost, "new", "nobody"),
            "no vhost 'nowhere'": (access.vhost_limits, "nowhere"),
            "unknown vhost limit 'max-channels'": (access.set_vhost_limits, "/", {"max-channels": 1}),
            "vhost limit 'max-queues' must be an integer": (access.set_vhost_limits, "/", {"max-queues": True}),
        }
        for text, (method, *arguments) in refusals.items():
            with pytest.raises(AccessControlError, match=re.escape(text)) as refused:
                lavin.call(method, *arguments)
            assert isinstance(refused.value, NotFoundError) == text.startswith("no ")
        with pytest.raises(NotFoundError, match="no vhost 'nowhere'"):
            lavin.wait(lambda: access.delete_vhost("nowhere"))
        assert lavin.call(access.vhosts) == ["/"]

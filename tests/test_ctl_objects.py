"""`lavin ctl` for queues, exchanges, bindings, connections, channels, consumers, policies and
status, against a broker child process: rabbitmqctl's commands, columns, lines and exit codes,
and `--json` output that parses."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pika
import pytest
from broker_process import BrokerFactory, BrokerProcess
from control_helpers import ctl, ctl_ok, login, rows
from helpers import eventually, unique_name
from pika.adapters.blocking_connection import BlockingChannel

EX_USAGE, EX_DATAERR = 64, 65


@pytest.fixture
def channel(broker: BrokerProcess) -> Iterator[BlockingChannel]:
    with login(broker, "guest", "guest") as connection:
        yield connection.channel()


def publish(channel: BlockingChannel, queue: str, count: int) -> None:
    channel.confirm_delivery()
    for number in range(count):
        channel.basic_publish("", queue, f"m{number}".encode())


def row_of(output: str, first: str) -> list[str]:
    """The table row whose first column is `first`."""
    found = [row for row in rows(output) if row[0] == first]
    assert len(found) == 1, output
    return found[0]


# ---- queues ------------------------------------------------------------------------------


def test_list_queues_with_columns_vhost_and_json(broker: BrokerProcess, channel: BlockingChannel) -> None:
    queue = unique_name("ctl-list")
    channel.queue_declare(queue, durable=True, arguments={"x-max-length": 100})
    publish(channel, queue, 3)
    listed = ctl_ok(broker, "list_queues")
    assert listed.splitlines()[:2] == ["Listing queues for vhost / ...", "name\tmessages"]
    assert row_of(listed, queue) == [queue, "3"]
    chosen = ctl_ok(broker, "list_queues", "name", "messages_ready", "consumers", "durable", "arguments")
    assert chosen.splitlines()[1] == "name\tmessages_ready\tconsumers\tdurable\targuments"
    assert row_of(chosen, queue) == [queue, "3", "0", "true", '{"x-max-length":100}']
    assert row_of(ctl_ok(broker, "list_queues", "name,messages_unacknowledged"), queue) == [queue, "0"]
    as_json = json.loads(ctl_ok(broker, "list_queues", "--json", "name", "messages", "type"))
    assert {"name": queue, "messages": 3, "type": "classic"} in as_json


def test_list_queues_in_another_vhost_and_errors(broker: BrokerProcess) -> None:
    vhost = unique_name("ctl-vhost")
    ctl_ok(broker, "add_vhost", vhost)
    ctl_ok(broker, "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
    with login(broker, "guest", "guest", vhost) as connection:
        connection.channel().queue_declare("only-here")
    listed = ctl_ok(broker, "list_queues", "-p", vhost)
    assert listed.splitlines()[0] == f"Listing queues for vhost {vhost} ..."
    assert rows(listed) == [["only-here", "0"]]
    unknown = ctl(broker, "list_queues", "name", "colour", "size")
    assert unknown.returncode == EX_USAGE
    assert unknown.stderr.startswith("Error:\nInfo key(s) colour,size are not supported")
    missing = ctl(broker, "list_queues", "-p", "no-such-vhost")
    assert (missing.returncode, missing.stderr) == (EX_DATAERR, 'Error:\nVirtual host "no-such-vhost" does not exist\n')
    ctl_ok(broker, "delete_vhost", vhost)


def test_purge_queue(broker: BrokerProcess, channel: BlockingChannel) -> None:
    queue = unique_name("ctl-purge")
    channel.queue_declare(queue)
    publish(channel, queue, 5)
    assert ctl_ok(broker, "purge_queue", queue) == f"Purging queue '{queue}' in vhost '/' ...\n"
    assert channel.queue_declare(queue, passive=True).method.message_count == 0
    missing = ctl(broker, "purge_queue", unique_name("none"))
    assert (missing.returncode, missing.stderr) == (EX_USAGE, "Error:\nQueue not found\n")


def test_delete_queue_if_empty_if_unused(broker: BrokerProcess, channel: BlockingChannel) -> None:
    queue = unique_name("ctl-delete")
    channel.queue_declare(queue)
    publish(channel, queue, 2)
    not_empty = ctl(broker, "delete_queue", queue, "--if-empty")
    assert not_empty.stdout == f"Deleting queue '{queue}' on vhost '/' if queue is empty ...\n"
    assert (not_empty.returncode, not_empty.stderr) == (EX_USAGE, "Error:\nQueue is not empty\n")
    consuming = channel.connection.channel()
    consuming.basic_consume(queue, lambda *_: None)
    in_use = ctl(broker, "delete_queue", "-u", queue)
    assert (in_use.returncode, in_use.stderr) == (EX_USAGE, "Error:\nQueue is in use\n")
    consuming.close()  # its deliveries go back to the queue
    deleted = ctl_ok(broker, "delete_queue", queue)
    assert deleted.splitlines()[-1] == "Queue was successfully deleted with 2 ready messages"
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as gone:
        channel.queue_declare(queue, passive=True)
    assert gone.value.reply_code == 404
    again = ctl(broker, "delete_queue", queue)
    assert (again.returncode, again.stderr) == (EX_USAGE, "Error:\nQueue not found\n")


# ---- exchanges and bindings --------------------------------------------------------------


def test_list_exchanges_and_bindings(broker: BrokerProcess, channel: BlockingChannel) -> None:
    exchange, queue = unique_name("ctl-ex"), unique_name("ctl-bound")
    channel.exchange_declare(exchange, "topic", durable=True)
    channel.queue_declare(queue)
    channel.queue_bind(queue, exchange, "orders.#", arguments={"x-note": "a"})
    exchanges = ctl_ok(broker, "list_exchanges")
    assert exchanges.splitlines()[:2] == ["Listing exchanges for vhost / ...", "name\ttype"]
    assert row_of(exchanges, exchange) == [exchange, "topic"]
    assert row_of(exchanges, "amq.fanout") == ["amq.fanout", "fanout"]
    chosen = ctl_ok(broker, "list_exchanges", "name", "durable", "auto_delete", "internal")
    assert row_of(chosen, exchange) == [exchange, "true", "false", "false"]
    bindings = ctl_ok(broker, "list_bindings")
    assert bindings.splitlines()[:2] == [
        "Listing bindings for vhost /...",
        "source_name\tsource_kind\tdestination_name\tdestination_kind\trouting_key\targuments",
    ]
    assert [exchange, "exchange", queue, "queue", "orders.#", '{"x-note":"a"}'] in rows(bindings)
    as_json = json.loads(ctl_ok(broker, "-q", "list_bindings", "--json", "source_name", "destination_name"))
    assert {"source_name": exchange, "destination_name": queue} in as_json


# ---- connections, channels, consumers ----------------------------------------------------


def test_connections_channels_consumers_and_close_connection(broker: BrokerProcess) -> None:
    client_name = unique_name("ctl-client")
    queue = unique_name("ctl-consumed")
    parameters = pika.ConnectionParameters(
        broker.host, broker.port, client_properties={"connection_name": client_name}, connection_attempts=1
    )
    connection = pika.BlockingConnection(parameters)
    try:
        channel = connection.channel()
        channel.queue_declare(queue)
        channel.basic_qos(prefetch_count=7)
        tag = channel.basic_consume(queue, lambda *_: None, consumer_tag="ctl-tag")
        found = json.loads(ctl_ok(broker, "list_connections", "--json", "name", "user", "client_properties"))
        ours = [entry for entry in found if entry["client_properties"].get("connection_name") == client_name]
        assert len(ours) == 1 and ours[0]["user"] == "guest"
        name = ours[0]["name"]
        assert ctl_ok(broker, "list_connections").splitlines()[:2] == [
            "Listing connections ...",
            "user\tpeer_host\tpeer_port\tstate",
        ]
        assert row_of(ctl_ok(broker, "list_connections", "pid", "vhost", "channels"), name) == [name, "/", "1"]
        channels = ctl_ok(broker, "list_channels", "connection", "user", "consumer_count", "prefetch_count")
        assert channels.splitlines()[1] == "connection\tuser\tconsumer_count\tprefetch_count"
        assert row_of(channels, name) == [name, "guest", "1", "7"]
        consumers = ctl_ok(broker, "list_consumers")
        assert consumers.splitlines()[:2] == [
            "Listing consumers in vhost / ...",
            "queue_name\tchannel_pid\tconsumer_tag\tack_required\tprefetch_count\tactive\targuments",
        ]
        row = row_of(consumers, queue)
        assert row[0] == queue and row[1].startswith(name) and row[2:] == [tag, "true", "7", "true", "{}"]

        closed = ctl_ok(broker, "close_connection", name, "maintenance window")
        assert closed == f"Closing connection {name}, reason: maintenance window...\n"

        def closed_by_broker() -> pika.exceptions.ConnectionClosedByBroker | None:
            try:
                connection.process_data_events(time_limit=0.1)
            except pika.exceptions.ConnectionClosedByBroker as exc:
                return exc
            return None

        reason = eventually(closed_by_broker)
        assert (reason.reply_code, reason.reply_text) == (320, "CONNECTION_FORCED - maintenance window")
    finally:
        if connection.is_open:
            connection.close()
    missing = ctl(broker, "close_connection", name, "again")
    assert (missing.returncode, missing.stderr) == (EX_DATAERR, f'Error:\nConnection "{name}" does not exist\n')


# ---- policies ----------------------------------------------------------------------------


def test_set_policy_limits_a_live_queue_and_clear_policy_removes_it(
    broker: BrokerProcess, channel: BlockingChannel
) -> None:
    queue, policy = unique_name("ctl-policied"), unique_name("ctl-policy")
    channel.queue_declare(queue)
    publish(channel, queue, 5)
    out = ctl_ok(broker, "set_policy", "--priority", "3", "--apply-to", "queues", policy, f"^{queue}$",
                 '{"max-length": 2}')  # fmt: skip
    assert out == (
        f'Setting policy "{policy}" for pattern "^{queue}$" to "{{"max-length": 2}}" '
        'with priority "3" for vhost "/" ...\n'
    )
    eventually(lambda: channel.queue_declare(queue, passive=True).method.message_count == 2)
    assert row_of(ctl_ok(broker, "list_queues", "name", "policy", "messages"), queue) == [queue, policy, "2"]
    listed = ctl_ok(broker, "list_policies")
    assert listed.splitlines()[:2] == [
        'Listing policies for vhost "/" ...',
        "vhost\tname\tpattern\tapply-to\tdefinition\tpriority",
    ]
    assert ["/", policy, f"^{queue}$", "queues", '{"max-length":2}', "3"] in rows(listed)
    as_json = json.loads(ctl_ok(broker, "list_policies", "--json"))
    assert {"vhost": "/", "name": policy, "pattern": f"^{queue}$", "apply-to": "queues",
            "definition": {"max-length": 2}, "priority": 3} in as_json  # fmt: skip

    assert ctl_ok(broker, "clear_policy", policy) == f'Clearing policy "{policy}" on vhost "/" ...\n'
    assert policy not in [row[1] for row in rows(ctl_ok(broker, "list_policies"))]
    publish(channel, queue, 3)
    assert channel.queue_declare(queue, passive=True).method.message_count == 5  # no limit any more
    again = ctl(broker, "clear_policy", policy)
    assert (again.returncode, again.stderr) == (EX_DATAERR, "Error:\nParameter does not exist\n")


@pytest.mark.parametrize(
    ("definition", "error"),
    [
        ("not json", "the definition must be a JSON object"),
        ('["max-length"]', "the definition must be a JSON object"),
        ('{"max-length": "ten"}', 'Validation failed\n\n<<"ten">> is not a valid maximum length'),
        ('{"no-such-key": 1}', "no-such-key"),
    ],
)
def test_set_policy_refuses_a_bad_definition(broker: BrokerProcess, definition: str, error: str) -> None:
    policy = unique_name("ctl-bad")
    result = ctl(broker, "set_policy", policy, ".*", definition)
    assert result.returncode == EX_DATAERR, result.stderr
    assert result.stderr.startswith("Error:\n") and error in result.stderr
    assert policy not in ctl_ok(broker, "list_policies")


def test_operator_policies(broker: BrokerProcess) -> None:
    policy = unique_name("ctl-op")
    out = ctl_ok(broker, "set_operator_policy", "--apply-to", "queues", policy, "^big\\.", '{"max-length": 1000}')
    assert out.startswith(f'Setting operator policy override "{policy}" for pattern "^big\\." to ')
    listed = ctl_ok(broker, "list_operator_policies")
    assert listed.splitlines()[0] == 'Listing operator policy overrides for vhost "/" ...'
    assert ["/", policy, "^big\\.", "queues", '{"max-length":1000}', "0"] in rows(listed)
    assert ctl_ok(broker, "clear_operator_policy", policy).startswith("Clearing operator policy override")
    assert policy not in ctl_ok(broker, "list_operator_policies")


def test_policies_travel_with_the_definitions(broker: BrokerProcess, broker_factory: BrokerFactory) -> None:
    policy = unique_name("ctl-exported")
    ctl_ok(broker, "set_policy", policy, "^exported\\.", '{"message-ttl": 60000}')
    document = json.loads(ctl_ok(broker, "export_definitions", "-"))
    assert {"vhost": "/", "name": policy, "pattern": "^exported\\.", "apply-to": "all",
            "definition": {"message-ttl": 60000}, "priority": 0} in document["policies"]  # fmt: skip
    other = broker_factory()
    imported = ctl(other, "import_definitions", "-", stdin=json.dumps(document))
    assert imported.returncode == 0, imported.stderr
    assert ["/", policy, "^exported\\.", "all", '{"message-ttl":60000}', "0"] in rows(ctl_ok(other, "list_policies"))
    ctl_ok(broker, "clear_policy", policy)


# ---- status and --json -------------------------------------------------------------------


def test_status(broker: BrokerProcess, channel: BlockingChannel) -> None:
    channel.queue_declare(unique_name("ctl-status"))
    out = ctl_ok(broker, "status")
    assert out.startswith("Status of node ")
    for section in ("Runtime", "Alarms", "Totals", "Listeners"):
        assert f"\n{section}\n\n" in out, out
    assert "Connection count: " in out and "Queue count: " in out
    assert f"port: {broker.port}, protocol: amqp" in out
    status = json.loads(ctl_ok(broker, "status", "--json"))
    assert status["overview"]["object_totals"]["queues"] >= 1
    assert status["vhost_count"] >= 1


def test_no_table_headers_prints_the_rows_only(broker: BrokerProcess, channel: BlockingChannel) -> None:
    queue = unique_name("ctl-rows")
    channel.queue_declare(queue)
    lines = ctl_ok(broker, "-q", "list_queues", "--no-table-headers", "name", "consumers").splitlines()
    assert f"{queue}\t0" in lines and "name\tconsumers" not in lines
    assert ctl_ok(broker, "-q", "list_vhosts", "--no-table-headers").splitlines()[0] != "name"


def test_existing_lists_print_json(broker: BrokerProcess) -> None:
    users = json.loads(ctl_ok(broker, "list_users", "--json"))
    assert {"user": "guest", "tags": ["administrator"]} in users
    assert {"name": "/"} in json.loads(ctl_ok(broker, "list_vhosts", "--json"))
    assert {"user": "guest", "configure": ".*", "write": ".*", "read": ".*"} in json.loads(
        ctl_ok(broker, "list_permissions", "--json")
    )

"""Who may use the management HTTP API on its TCP port, as in RabbitMQ: HTTP Basic with the
broker's users, and tags that decide what each user may see and do. Also the listener's
own settings (port 0, port -1) and the list parameters every list endpoint takes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
from broker_process import BrokerProcess, port_accepts
from control_helpers import ctl_ok
from helpers import unique_name

GUEST = ("guest", "guest")


@pytest.fixture(scope="module")
def users(broker: BrokerProcess) -> Iterator[BrokerProcess]:
    """A management user with permissions on vhost `team` only, a monitoring user, a user
    without tags, and vhosts `team` and `other`."""
    for vhost in ("team", "other"):
        ctl_ok(broker, "add_vhost", vhost)
    for name, tags in (("manager", "management"), ("watcher", "monitoring"), ("plain", "")):
        ctl_ok(broker, "add_user", name, "pw")
        ctl_ok(broker, "set_user_tags", name, *tags.split())
    ctl_ok(broker, "set_permissions", "-p", "team", "manager", ".*", ".*", ".*")
    yield broker
    for name in ("manager", "watcher", "plain"):
        ctl_ok(broker, "delete_user", name)
    for vhost in ("team", "other"):
        ctl_ok(broker, "delete_vhost", vhost)


def get(broker: BrokerProcess, path: str, auth: tuple[str, str] | None = GUEST, **params: str) -> requests.Response:
    return requests.get(f"{broker.http_url}{path}", auth=auth, params=params, timeout=10)


def names(response: requests.Response) -> list[Any]:
    assert response.status_code == 200, response.text
    return [item["name"] for item in response.json()]


def test_a_request_without_credentials_is_401_with_rabbitmqs_realm(broker: BrokerProcess) -> None:
    response = get(broker, "/api/vhosts", auth=None)
    assert response.status_code == 401
    assert response.json() == {"error": "not_authorized", "reason": "Not_Authorized"}
    assert response.headers["WWW-Authenticate"] == 'Basic realm="RabbitMQ Management"'


def test_a_wrong_password_is_401(broker: BrokerProcess) -> None:
    assert get(broker, "/api/vhosts", auth=("guest", "wrong")).status_code == 401


def test_a_user_without_a_management_tag_is_401(users: BrokerProcess) -> None:
    response = get(users, "/api/vhosts", auth=("plain", "pw"))
    assert response.status_code == 401
    assert response.json()["reason"] == "Not management user"


def test_a_management_user_sees_only_the_vhosts_it_has_permissions_on(users: BrokerProcess) -> None:
    assert names(get(users, "/api/vhosts", auth=("manager", "pw"))) == ["team"]


def test_one_vhost_is_for_administrators_as_in_rabbitmq(users: BrokerProcess) -> None:
    for auth, vhost in ((("manager", "pw"), "team"), (("manager", "pw"), "other"), (("watcher", "pw"), "team")):
        refused = get(users, f"/api/vhosts/{vhost}", auth=auth)
        assert refused.status_code == 401
        assert refused.json() == {"error": "not_authorised", "reason": "Not administrator user"}
    assert get(users, "/api/vhosts/team").json()["name"] == "team"


def test_monitoring_and_administrator_users_see_every_vhost(users: BrokerProcess) -> None:
    assert names(get(users, "/api/vhosts", auth=("watcher", "pw"))) == ["/", "other", "team"]
    assert names(get(users, "/api/vhosts")) == ["/", "other", "team"]


def test_users_and_permissions_are_for_administrators(users: BrokerProcess) -> None:
    for auth in (("manager", "pw"), ("watcher", "pw")):
        response = get(users, "/api/users", auth=auth)
        assert response.status_code == 401
        assert response.json()["reason"] == "Not administrator user"
    assert "manager" in names(get(users, "/api/users"))


def test_list_endpoints_take_rabbitmqs_paging_sorting_and_columns(users: BrokerProcess) -> None:
    page = get(users, "/api/vhosts", page="1", page_size="2", sort="name", sort_reverse="true", columns="name")
    assert page.status_code == 200
    assert page.json() == {
        "filtered_count": 3,
        "item_count": 2,
        "items": [{"name": "team"}, {"name": "other"}],
        "page": 1,
        "page_count": 2,
        "page_size": 2,
        "total_count": 3,
    }
    filtered = get(users, "/api/vhosts", page="1", name="^t", use_regex="true").json()
    assert [item["name"] for item in filtered["items"]] == ["team"]
    assert filtered["filtered_count"] == 1


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ({"page": "0"}, "page must be a positive integer, got '0'"),
        ({"page": "x"}, "page must be a positive integer, got 'x'"),
        ({"page": "1", "page_size": "501"}, "page_size must be between 1 and 500"),
        ({"page": "9"}, "page out of range: 9 of 1"),
        ({"page": "1", "name": "(", "use_regex": "true"}, "invalid regular expression '('"),
    ],
)
def test_bad_list_parameters_are_400_with_the_reason(
    broker: BrokerProcess, params: dict[str, str], reason: str
) -> None:
    response = get(broker, "/api/vhosts", **params)
    assert response.status_code == 400
    assert response.json()["error"] == "bad_request"
    assert response.json()["reason"].startswith(reason)


def test_http_port_minus_one_opens_no_listener(tmp_path: Any) -> None:
    # the later flag wins over the free port BrokerProcess passes first
    process = BrokerProcess(tmp_path / "data", extra_args=["--http-port", "-1", "--metrics-http-port", "-1"])
    process.start()
    try:
        assert not port_accepts(process.http_port)
        assert "(management API and web UI)" not in process.output
    finally:
        process.stop()


def test_a_taken_http_port_stops_start_up_naming_it(broker: BrokerProcess, tmp_path: Any) -> None:
    process = BrokerProcess(tmp_path / "data", extra_args=["--http-port", str(broker.http_port)])
    with pytest.raises(RuntimeError, match=f"cannot listen on 127.0.0.1:{broker.http_port} \\(management API"):
        process.start()
    assert "Traceback" not in process.output


def test_the_administrator_who_creates_a_vhost_gets_full_permissions_on_it(broker: BrokerProcess) -> None:
    vhost = unique_name("made-over-http")
    created = requests.put(f"{broker.http_url}/api/vhosts/{vhost}", auth=GUEST, json={}, timeout=10)
    assert created.status_code == 201
    try:
        permissions = get(broker, f"/api/permissions/{vhost}/guest").json()
        assert (permissions["configure"], permissions["write"], permissions["read"]) == (".*", ".*", ".*")
    finally:
        requests.delete(f"{broker.http_url}/api/vhosts/{vhost}", auth=GUEST, timeout=10)


def test_users_without_permissions_and_bulk_delete(broker: BrokerProcess) -> None:
    lonely, other = unique_name("lonely"), unique_name("lonely")
    for name in (lonely, other):
        ctl_ok(broker, "add_user", name, "pw")
    names = [user["name"] for user in get(broker, "/api/users/without-permissions").json()]
    assert lonely in names and other in names and "guest" not in names
    url = f"{broker.http_url}/api/users/bulk-delete"
    deleted = requests.post(url, auth=GUEST, json={"users": [lonely, other, "no-such-user"]}, timeout=10)
    assert deleted.status_code == 204
    assert get(broker, f"/api/users/{lonely}").status_code == 404
    assert get(broker, f"/api/users/{other}").status_code == 404
    bad = requests.post(url, auth=GUEST, json={"users": "guest"}, timeout=10)
    assert (bad.status_code, bad.json()["reason"]) == (400, "users must be a list of user names")
    assert get(broker, "/api/users/guest").status_code == 200

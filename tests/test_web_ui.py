"""The web UI in a real browser: Debian's chromium, headless, driven by Playwright (the pip
package only; it downloads no browser). The tests log in, declare a queue, publish to it,
watch its count change, get the message and log out, as a user would.

`LAVIN_SCREENSHOTS=1` also writes the screenshots docs/management.md shows (docs/images/);
other runs leave docs/ alone.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
import requests
from broker_process import BrokerProcess, stop_quietly
from helpers import unique_name
from lavin.broker.runtime.cluster_status import FOLLOWER, LEADER, ClusterMember, ClusterState
from lavin.testing import running_broker

UI_DIR = Path(__file__).resolve().parent.parent / "core" / "management" / "ui"
IMAGES_DIR = Path(__file__).resolve().parent.parent / "docs" / "images"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
GUEST = ("guest", "guest")
# The UI refreshes every 5 s; an action it answers at once needs far less.
WAIT_MS = 12_000

try:
    from playwright.sync_api import Browser, Page, expect, sync_playwright
except ImportError:  # the `test` extra brings it; say so rather than fail collection
    sync_playwright = None

needs_browser = pytest.mark.skipif(
    sync_playwright is None or CHROMIUM is None,
    reason="the web UI tests need "
    + ("the playwright package (the `test` extra)" if sync_playwright is None else "chromium on PATH")
    + " (`make test` installs both)",
)


@pytest.fixture(scope="module")
def ui_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker of the module's own: the overview's totals are this module's only."""
    process = BrokerProcess(tmp_path_factory.mktemp("web-ui") / "data")
    process.start()
    yield process
    stop_quietly(process)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert sync_playwright is not None and CHROMIUM is not None
    with sync_playwright() as playwright:
        expect.set_options(timeout=WAIT_MS)
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A new tab with its own session storage; confirmation dialogs are answered yes."""
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    context.set_default_timeout(WAIT_MS)
    tab = context.new_page()
    tab.on("dialog", lambda dialog: dialog.accept())
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    yield tab
    context.close()
    assert errors == [], errors


def log_in(page: Page, broker: BrokerProcess, username: str = "guest", password: str = "guest") -> None:
    page.goto(broker.http_url + "/")
    page.fill("#login input[name=username]", username)
    page.fill("#login input[name=password]", password)
    page.click("#login button[type=submit]")


def add_queue(page: Page, name: str) -> None:
    page.goto(page.url.split("#")[0] + "#/queues")
    declare = page.locator("form", has_text="Add a new queue")
    declare.locator("input[name=name]").fill(name)
    declare.locator("button[type=submit]").click()
    expect(declare.locator(".notice.ok")).to_have_text(f"Queue {name} declared.")


def declare_with_pika(broker: BrokerProcess, *names: str) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        channel = connection.channel()
        for name in names:
            channel.queue_declare(name, durable=True)
    finally:
        connection.close()


# ---- without a browser: the files are served, from the installed package -----------------


def test_every_ui_file_is_served_with_its_security_headers(ui_broker: BrokerProcess) -> None:
    shipped = sorted(path.relative_to(UI_DIR).as_posix() for path in UI_DIR.rglob("*") if path.is_file())
    assert "index.html" in shipped and "js/main.js" in shipped, shipped
    for name in shipped:
        response = requests.get(f"{ui_broker.http_url}/ui/{name}", timeout=10)
        assert response.status_code == 200, name
        assert response.content == (UI_DIR / name).read_bytes(), name
        assert "default-src 'self'" in response.headers["Content-Security-Policy"], name
    index = requests.get(ui_broker.http_url + "/", timeout=10)
    assert index.status_code == 200 and index.headers["Content-Type"].startswith("text/html")
    assert index.content == (UI_DIR / "index.html").read_bytes()


def test_only_shipped_files_are_served(ui_broker: BrokerProcess) -> None:
    for name in ("../app.py", "%2E%2E/app.py", "../routes/ui.py", "js/../../app.py", "nothing.js"):
        response = requests.get(f"{ui_broker.http_url}/ui/{name}", timeout=10)
        assert response.status_code == 404, name
        assert response.json() == {"error": "Object Not Found", "reason": "Not Found"}


# ---- in the browser -------------------------------------------------------------------------


@needs_browser
def test_log_in_declare_publish_get_and_log_out(page: Page, ui_broker: BrokerProcess) -> None:
    log_in(page, ui_broker)
    expect(page.locator("#who")).to_have_text("User guest")
    name = unique_name("ui")
    add_queue(page, name)

    page.get_by_role("link", name=name, exact=True).click()
    expect(page.locator("h1")).to_have_text(f"Queue {name}")
    ready = page.locator("[data-count=ready]")
    expect(ready).to_have_text("0")
    publish = page.locator("form", has_text="Publish a message")
    publish.locator("textarea[name=payload]").fill("hello from the browser")
    publish.locator("button[type=submit]").click()
    expect(publish.locator(".notice.ok")).to_have_text("Message published.")
    expect(ready).to_have_text("1")

    get_form = page.locator("form", has_text="Get messages")
    get_form.locator("select[name=ackmode]").select_option("ack_requeue_false")
    get_form.locator("button[type=submit]").click()
    expect(page.locator(".payload")).to_have_text("hello from the browser")
    expect(ready).to_have_text("0")
    assert requests.get(f"{ui_broker.http_url}/api/queues/%2F/{name}", auth=GUEST, timeout=10).json()["messages"] == 0

    page.click("#logout")
    expect(page.locator("#login")).to_be_visible()
    expect(page.locator("#nav")).to_be_hidden()
    assert page.evaluate("sessionStorage.length") == 0
    page.goto(f"{ui_broker.http_url}/#/queues")
    expect(page.locator("#login")).to_be_visible()


def submit(page: Page, form_title: str, **values: str) -> None:
    """Fill a form's text fields by name and submit it; wait for its success notice."""
    form = page.locator("form", has_text=form_title)
    for name, value in values.items():
        form.locator(f"[name='{name}']").fill(value)
    form.locator("button[type=submit]").click()
    expect(form.locator(".notice.ok")).to_be_visible()


def api_get(broker: BrokerProcess, path: str) -> Any:
    response = requests.get(f"{broker.http_url}{path}", auth=GUEST, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


@needs_browser
def test_an_exchange_bound_to_a_queue_routes_what_its_page_publishes(page: Page, ui_broker: BrokerProcess) -> None:
    exchange, queue = unique_name("ui-x"), unique_name("ui-q")
    log_in(page, ui_broker)
    page.goto(f"{ui_broker.http_url}/#/exchanges")
    submit(page, "Add a new exchange", name=exchange)
    add_queue(page, queue)
    page.goto(f"{ui_broker.http_url}/#/queues/%2F/{queue}")
    submit(page, "Add a binding to this queue", source=exchange, routing_key="invoices")
    expect(page.get_by_role("link", name=exchange, exact=True)).to_be_visible()

    page.goto(f"{ui_broker.http_url}/#/exchanges/%2F/{exchange}")
    expect(page.get_by_role("link", name=queue, exact=True)).to_be_visible()  # the binding, from this side
    publish = page.locator("form", has_text="Publish a message")
    submit(page, "Publish a message", routing_key="invoices", payload="routed")
    expect(publish.locator(".notice.ok")).to_have_text("Message published.")
    submit(page, "Publish a message", routing_key="elsewhere", payload="lost")
    expect(publish.locator(".notice.ok")).to_have_text("Message published, but not routed.")
    assert api_get(ui_broker, f"/api/queues/%2F/{queue}")["messages"] == 1


@needs_browser
def test_policies_vhosts_users_and_permissions_pages_change_the_broker(page: Page, ui_broker: BrokerProcess) -> None:
    vhost, user, policy = unique_name("ui-vhost"), unique_name("ui-user"), unique_name("ui-policy")
    log_in(page, ui_broker)
    page.goto(f"{ui_broker.http_url}/#/vhosts")
    submit(page, "Add a virtual host", name=vhost)
    expect(page.locator("td", has_text=vhost)).to_be_visible()
    page.goto(f"{ui_broker.http_url}/#/users")
    submit(page, "Add or update a user", name=user, password="pw", tags="monitoring")
    page.locator("form", has_text="Set permissions").locator("select[name=vhost]").select_option(vhost)
    submit(page, "Set permissions", user=user, read="^reports$")
    expect(page.locator("td", has_text="^reports$")).to_be_visible()
    page.goto(f"{ui_broker.http_url}/#/policies")
    page.locator("form", has_text="Add or update a policy").locator("select[name=vhost]").select_option(vhost)
    submit(page, "Add or update a policy", name=policy, pattern="^orders", definition="max-length=10")
    expect(page.locator("td", has_text=policy)).to_be_visible()

    assert api_get(ui_broker, f"/api/vhosts/{vhost}")["name"] == vhost
    assert api_get(ui_broker, f"/api/users/{user}")["tags"] == ["monitoring"]
    assert api_get(ui_broker, f"/api/permissions/{vhost}/{user}")["read"] == "^reports$"
    assert api_get(ui_broker, f"/api/policies/{vhost}/{policy}")["definition"] == {"max-length": 10}
    requests.delete(f"{ui_broker.http_url}/api/users/{user}", auth=GUEST, timeout=10)
    requests.delete(f"{ui_broker.http_url}/api/vhosts/{vhost}", auth=GUEST, timeout=10)


@needs_browser
def test_definitions_download_and_upload(page: Page, ui_broker: BrokerProcess, tmp_path: Path) -> None:
    kept, imported = unique_name("ui-kept"), unique_name("ui-imported")
    declare_with_pika(ui_broker, kept)
    log_in(page, ui_broker)
    page.goto(f"{ui_broker.http_url}/#/definitions")
    with page.expect_download() as download:
        page.get_by_role("button", name="Download broker definitions").click()
    exported = json.loads(Path(download.value.path()).read_text())
    assert kept in [queue["name"] for queue in exported["queues"]]

    upload = tmp_path / "definitions.json"
    queue = {"name": imported, "vhost": "/", "durable": True, "auto_delete": False, "arguments": {}}
    upload.write_text(json.dumps({"queues": [queue]}))
    form = page.locator("form", has_text="Import definitions")
    form.locator("input[type=file]").set_input_files(upload)
    form.locator("button[type=submit]").click()
    expect(form.locator(".notice.ok")).to_have_text("Definitions imported.")
    assert api_get(ui_broker, f"/api/queues/%2F/{imported}")["durable"] is True


@needs_browser
def test_the_overview_shows_the_node_vitals(page: Page, ui_broker: BrokerProcess) -> None:
    log_in(page, ui_broker)
    vitals = page.locator("section", has_text="Node vitals")
    for name in ("memory", "disk", "fd", "sockets", "uptime", "lag"):
        expect(vitals.locator(f"[data-vital={name}]")).to_be_visible()
    expect(vitals.locator("[data-vital=memory]")).to_contain_text("high watermark")
    expect(vitals.locator("[data-vital=lag]")).to_contain_text(" ms")
    expect(vitals.locator(".alarm")).to_have_count(0)


@needs_browser
def test_the_overview_lists_the_single_node_as_leader(page: Page, ui_broker: BrokerProcess) -> None:
    log_in(page, ui_broker)
    rows = page.locator("section", has_text="Nodes").locator("tbody tr")
    expect(rows).to_have_count(1)
    node = api_get(ui_broker, "/api/nodes")[0]["name"]
    expect(rows.first.locator("td")).to_have_text([node, "leader", "yes", "", ""])


@needs_browser
def test_the_overview_lists_every_node_of_a_cluster(page: Page, tmp_path: Path) -> None:
    state: dict[str, ClusterState] = {}
    with running_broker(tmp_path / "data", cluster=lambda: state["now"]) as leader:
        node = requests.get(f"{leader.http_url}/api/overview", auth=GUEST, timeout=30).json()["node"]
        behind = ClusterMember("lavin@c", FOLLOWER, False, "tcp://127.0.0.3:5679", None, None, 40960, 12.5)
        here = ClusterMember(node, LEADER, True, "tcp://127.0.0.1:5679", None, None)
        state["now"] = ClusterState(node, node, (here, behind), (node,), ())
        log_in(page, leader)  # a LavinBroker: log_in reads its http_url only
        rows = page.locator("section", has_text="Nodes").locator("tbody tr")
        expect(rows).to_have_count(2)
        expect(rows.nth(1).locator("td")).to_have_text(["lavin@c", "follower", "no", "40,960", "12.5"])
        expect(page.locator("section", has_text="Node vitals").locator("[data-vital=uptime]")).to_contain_text(node)


@needs_browser
def test_a_disk_alarm_turns_the_disk_vital_red(page: Page, tmp_path: Path) -> None:
    """A free-disk limit no disk has: the alarm is on from start-up."""
    ini = tmp_path / "lavin.ini"
    ini.write_text("[main]\ndisk_free_limit.absolute = 999999TB\n")
    alarmed = BrokerProcess(tmp_path / "data", extra_args=["--config", str(ini)])
    alarmed.start()
    try:
        assert api_get(alarmed, "/api/nodes")[0]["disk_free_alarm"] is True
        log_in(page, alarmed)
        disk = page.locator("[data-vital=disk]")
        expect(disk).to_have_class("vital alarm")
        expect(disk).to_contain_text("(alarm)")
        expect(disk.locator("strong")).to_have_css("color", "rgb(180, 35, 24)")  # style.css's --danger
        expect(page.locator("[data-vital=memory]")).to_have_class("vital")
    finally:
        stop_quietly(alarmed)


@needs_browser
def test_a_wrong_password_shows_an_error(page: Page, ui_broker: BrokerProcess) -> None:
    log_in(page, ui_broker, password="wrong")
    expect(page.get_by_role("alert")).to_have_text("Login failed: the username or password is not right.")
    expect(page.locator("#nav")).to_be_hidden()
    assert page.evaluate("sessionStorage.length") == 0


@needs_browser
def test_a_refused_request_returns_to_the_login_form(page: Page, ui_broker: BrokerProcess) -> None:
    """The user's password changes under an open session: the next poll is a 401."""
    user = unique_name("ui-admin")
    api_user = f"{ui_broker.http_url}/api/users/{user}"
    assert requests.put(api_user, json={"password": "one", "tags": "administrator"}, auth=GUEST, timeout=10).ok
    try:
        log_in(page, ui_broker, user, "one")
        expect(page.locator("#who")).to_have_text(f"User {user}")
        assert requests.put(api_user, json={"password": "two", "tags": "administrator"}, auth=GUEST, timeout=10).ok
        page.goto(f"{ui_broker.http_url}/#/users")
        expect(page.get_by_role("alert")).to_contain_text("Logged out")
        expect(page.locator("#login")).to_be_visible()
    finally:
        requests.delete(api_user, auth=GUEST, timeout=10)


@needs_browser
def test_a_page_the_tags_do_not_allow_is_refused_without_logging_out(page: Page, ui_broker: BrokerProcess) -> None:
    user = unique_name("ui-manager")
    api_user = f"{ui_broker.http_url}/api/users/{user}"
    assert requests.put(api_user, json={"password": "pw", "tags": "management"}, auth=GUEST, timeout=10).ok
    try:
        log_in(page, ui_broker, user, "pw")
        expect(page.locator("#who")).to_have_text(f"User {user}")
        expect(page.locator("#nav a[href='#/users']")).to_be_hidden()
        page.goto(f"{ui_broker.http_url}/#/users")
        expect(page.get_by_role("alert").first).to_have_text("Not administrator user")
        expect(page.locator("#who")).to_be_visible()
        assert page.evaluate("sessionStorage.length") == 2
    finally:
        requests.delete(api_user, auth=GUEST, timeout=10)


@needs_browser
def test_a_queue_named_with_html_is_shown_as_text(page: Page, ui_broker: BrokerProcess) -> None:
    name = f'<img src=x onerror="window.injected=1"><b id="injected">{unique_name("bold")}</b>'
    declare_with_pika(ui_broker, name)
    log_in(page, ui_broker)
    page.goto(f"{ui_broker.http_url}/#/queues")
    expect(page.get_by_role("link", name=name, exact=True)).to_be_visible()
    page.get_by_role("link", name=name, exact=True).click()
    expect(page.locator("h1")).to_have_text(f"Queue {name}")
    assert page.locator("#injected").count() == 0
    assert page.locator("main img").count() == 0
    assert page.evaluate("window.injected") is None


@needs_browser
def test_closing_a_connection(page: Page, ui_broker: BrokerProcess) -> None:
    client_name = unique_name("ui-client")
    parameters = pika.URLParameters(ui_broker.url)
    parameters.client_properties = {"connection_name": client_name}
    connection = pika.BlockingConnection(parameters)
    try:
        log_in(page, ui_broker)
        page.goto(f"{ui_broker.http_url}/#/connections")
        row = page.locator("tr", has_text=client_name)
        row.get_by_role("button", name="Close").click()
        expect(row).to_have_count(0)
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker, match="Closed via management plugin"):
            connection.process_data_events(time_limit=5)
    finally:
        if connection.is_open:
            connection.close()


@needs_browser
def test_the_stream_browser_reads_without_consuming(page: Page, ui_broker: BrokerProcess) -> None:
    name = unique_name("ui-stream")
    connection = pika.BlockingConnection(pika.URLParameters(ui_broker.url))
    try:
        channel = connection.channel()
        channel.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
        channel.confirm_delivery()
        for number in range(3):
            channel.basic_publish("", name, f"event {number}".encode())
    finally:
        connection.close()
    log_in(page, ui_broker)
    page.goto(f"{ui_broker.http_url}/#/queues/%2F/{name}")
    browse = page.locator("form", has_text="Browse the stream")
    browse.locator("input[name=offset]").fill("1")
    browse.locator("button[type=submit]").click()
    expect(page.locator(".payload")).to_have_text(["event 1", "event 2"])
    browse.locator("button[type=submit]").click()  # nothing was consumed: the same again
    expect(page.locator(".payload")).to_have_text(["event 1", "event 2"])


@needs_browser
def test_shovels_are_added_paused_resumed_and_deleted_and_upstreams_added(page: Page, ui_broker: BrokerProcess) -> None:
    shovel, source, destination = unique_name("ui-shovel"), unique_name("ui-src"), unique_name("ui-dest")
    upstream = unique_name("ui-upstream")
    declare_with_pika(ui_broker, source, destination)
    log_in(page, ui_broker)
    page.goto(f"{ui_broker.http_url}/#/shovels")
    expect(page.locator("h1")).to_have_text("Shovels and federation")
    submit(page, "Add a shovel", **{"name": shovel, "src-queue": source, "dest-queue": destination})
    row = page.locator("tr", has_text=shovel)
    state, forwarded = row.locator(".link-state"), row.locator("td").nth(5)
    expect(state).to_have_text("running")
    expect(forwarded).to_have_text("0")

    connection = pika.BlockingConnection(pika.URLParameters(ui_broker.url))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        for number in range(7):
            channel.basic_publish("", source, f"moved {number}".encode())
    finally:
        connection.close()
    expect(forwarded).to_have_text("7")  # at the page's next refresh
    assert api_get(ui_broker, f"/api/queues/%2F/{destination}")["messages"] == 7

    row.get_by_role("button", name="Pause").click()
    expect(state).to_have_text("paused")
    assert api_get(ui_broker, f"/api/shovels/vhost/%2F/{shovel}")["state"] == "paused"
    row.get_by_role("button", name="Resume").click()
    expect(state).to_have_text("running")
    row.get_by_role("button", name="Delete").click()  # the confirmation is answered yes
    expect(row).to_have_count(0)
    stored = requests.get(f"{ui_broker.http_url}/api/parameters/shovel/%2F/{shovel}", auth=GUEST, timeout=10)
    assert stored.status_code == 404

    uri = "amqp://guest:guest@127.0.0.1:5672/%2F"
    submit(page, "Add a federation upstream", name=upstream, uri=uri, exchange="orders")
    added = api_get(ui_broker, f"/api/parameters/federation-upstream/%2F/{upstream}")["value"]
    assert added == {"uri": uri, "max-hops": 1, "exchange": "orders"}
    requests.delete(f"{ui_broker.http_url}/api/parameters/federation-upstream/%2F/{upstream}", auth=GUEST, timeout=10)


# ---- screenshots for docs/management.md ------------------------------------------------------


def publish_for_a_while(broker: BrokerProcess, queues: list[str], stop: threading.Event) -> None:
    """Traffic for the overview's charts: a changing publish rate, one queue consumed with
    100 deliveries in flight, another purged now and then."""
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=200)
    in_flight: list[int] = []
    channel.basic_consume(queues[-1], lambda _channel, method, _props, _body: in_flight.append(method.delivery_tag))
    properties = pika.BasicProperties(content_type="application/json", delivery_mode=2)
    started = time.monotonic()
    purged_at = 0
    while not stop.is_set():
        second = int(time.monotonic() - started)
        for _ in range(20 + (second % 12) * 15):
            channel.basic_publish("", queues[second % len(queues)], b'{"order": 1}', properties)
        if second % 15 == 14 and purged_at != second:
            purged_at = second
            channel.queue_purge(queues[0])
        connection.process_data_events(time_limit=0.25)
        if len(in_flight) > 100:
            channel.basic_ack(in_flight[-101], multiple=True)
            del in_flight[:-100]
    connection.close()


@needs_browser
@pytest.mark.timeout(180)
@pytest.mark.skipif(os.environ.get("LAVIN_SCREENSHOTS") != "1", reason="writes docs/images/: set LAVIN_SCREENSHOTS=1")
def test_screenshots_for_the_docs(browser: Browser, ui_broker: BrokerProcess) -> None:
    IMAGES_DIR.mkdir(exist_ok=True)
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()

    def shoot(name: str, **options: Any) -> None:
        page.screenshot(path=str(IMAGES_DIR / f"{name}.png"), **options)

    page.goto(ui_broker.http_url + "/")
    page.fill("#login input[name=username]", "guest")
    shoot("login")
    page.fill("#login input[name=password]", "guest")
    page.click("#login button[type=submit]")

    queues = ["orders", "invoices", "emails"]
    declare_with_pika(ui_broker, *queues)
    stop = threading.Event()
    publisher = threading.Thread(target=publish_for_a_while, args=(ui_broker, queues, stop))
    publisher.start()
    try:
        page.wait_for_timeout(60_000)  # twelve samples for the charts
        shoot("overview")
        shoot("overview-vitals", clip={"x": 0, "y": 0, "width": 1280, "height": 420})
        page.goto(f"{ui_broker.http_url}/#/queues")
        page.locator("form", has_text="Add a new queue").locator("input[name=name]").fill("payments")
        page.wait_for_timeout(5_500)
        shoot("queues")
    finally:
        stop.set()
        publisher.join()
    page.goto(f"{ui_broker.http_url}/#/queues/%2F/invoices")
    get_form = page.locator("form", has_text="Get messages")
    get_form.locator("button[type=submit]").click()
    expect(page.locator(".payload")).to_have_text('{"order": 1}')
    page.wait_for_timeout(500)
    shoot("queue-details", full_page=True)
    context.close()

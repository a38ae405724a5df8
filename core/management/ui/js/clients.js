// Connections (with a button to close one), channels and consumers.

import { api, path } from "./api.js";
import { bytes, dangerButton, h, keyValues, link, number, replace, statRate, yesNo } from "./dom.js";
import { listView } from "./list.js";

// RabbitMQ's reason for a connection closed from its management UI.
const CLOSE_REASON = "Closed via management plugin";

function clientName(connection) {
  const properties = connection.client_properties || {};
  return [properties.connection_name, properties.product, properties.version].filter(Boolean).join(" ");
}

function byteRate(details) {
  return details ? `${bytes(Math.round(details.rate))}/s` : "";
}

export function connections(page) {
  const list = listView(page, {
    url: "/api/connections",
    empty: "No connections.",
    columns: [
      { title: "Virtual host", cell: (c) => c.vhost },
      { title: "Name", cell: (c) => c.name },
      { title: "User", cell: (c) => c.user },
      { title: "State", cell: (c) => c.state },
      { title: "Protocol", cell: (c) => c.protocol },
      { title: "Client", cell: clientName },
      { title: "Channels", numeric: true, cell: (c) => number(c.channels) },
      { title: "From client", numeric: true, cell: (c) => byteRate(c.recv_oct_details) },
      { title: "To client", numeric: true, cell: (c) => byteRate(c.send_oct_details) },
      { title: "", cell: (c) => dangerButton("Close", `Close connection ${c.name}?`, async () => {
        await api("DELETE", path`/api/connections/${c.name}`, undefined, { "X-Reason": CLOSE_REASON });
        list.reload();
      }) },
    ],
  });
  replace(page.main, h("h1", {}, "Connections"), list.element);
}

export function channels(page) {
  const list = listView(page, {
    url: "/api/channels",
    empty: "No channels.",
    columns: [
      { title: "Virtual host", cell: (c) => c.vhost },
      { title: "Channel", cell: (c) => c.name },
      { title: "User", cell: (c) => c.user },
      { title: "Mode", cell: (c) => [c.confirm ? "C" : "", c.transactional ? "T" : ""].join("") },
      { title: "State", cell: (c) => c.state },
      { title: "Consumers", numeric: true, cell: (c) => number(c.consumer_count) },
      { title: "Prefetch", numeric: true, cell: (c) => number(c.prefetch_count) },
      { title: "Unacked", numeric: true, cell: (c) => number(c.messages_unacknowledged) },
      { title: "Publish", numeric: true, cell: (c) => statRate(c, "publish") },
      { title: "Deliver / get", numeric: true, cell: (c) => statRate(c, "deliver_get") },
      { title: "Ack", numeric: true, cell: (c) => statRate(c, "ack") },
    ],
  });
  replace(page.main, h("h1", {}, "Channels"), h("p", { class: "hint" }, "Mode: C confirms, T transactional."),
    list.element);
}

export function consumers(page) {
  const list = listView(page, {
    url: "/api/consumers",
    empty: "No consumers.",
    columns: [
      { title: "Virtual host", cell: (c) => (c.queue || {}).vhost },
      { title: "Queue", cell: (c) => link((c.queue || {}).name, "queues", (c.queue || {}).vhost, (c.queue || {}).name) },
      { title: "Channel", cell: (c) => (c.channel_details || {}).name },
      { title: "Consumer tag", cell: (c) => c.consumer_tag },
      { title: "Ack required", cell: (c) => yesNo(c.ack_required) },
      { title: "Exclusive", cell: (c) => yesNo(c.exclusive) },
      { title: "Prefetch", numeric: true, cell: (c) => number(c.prefetch_count) },
      { title: "Active", cell: (c) => yesNo(c.active) },
      { title: "Arguments", cell: (c) => keyValues(c.arguments) },
    ],
  });
  replace(page.main, h("h1", {}, "Consumers"), list.element);
}

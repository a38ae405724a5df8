// Shovels and federation: the status of every shovel and federation link, shovel control
// (restart, pause, resume, delete), and forms that add a shovel or a federation upstream.

import { api, path } from "./api.js";
import { dangerButton, field, form, h, input, number, replace, section, select } from "./dom.js";
import { listView, vhostSelect } from "./list.js";

const ACK_MODES = ["on-confirm", "on-publish", "no-ack"];

function state(row, key) {
  const text = row[key];
  const reason = row.reason || row.error;
  return h("span", { class: `link-state ${text}`, title: reason || null }, reason ? `${text}: ${reason}` : text);
}

function ends(row, side) {
  const names = ["queue", "exchange", "exchange_key"].map((key) => row[`${side}_${key}`]).filter(Boolean);
  return [row[`${side}_uri`] || "", names.length ? h("div", { class: "muted" }, names.join(" / ")) : null];
}

function control(list, row, action, method) {
  return h("button", { type: "button", onclick: async () => {
    const url = action === "restart"
      ? path`/api/shovels/vhost/${row.vhost}/${row.name}/restart`
      : path`/api/shovels/${row.vhost}/${row.name}/` + action;
    try {
      await api(method, url);
    } catch (error) {
      if (error.status !== 401) window.alert(error.message);
    }
    list.reload();
  } }, action[0].toUpperCase() + action.slice(1));
}

function shovels(page) {
  const list = listView(page, {
    url: "/api/shovels",
    empty: "No shovels.",
    columns: [
      { title: "Virtual host", cell: (s) => s.vhost },
      { title: "Name", cell: (s) => s.name },
      { title: "State", cell: (s) => state(s, "state") },
      { title: "Source", cell: (s) => ends(s, "src") },
      { title: "Destination", cell: (s) => ends(s, "dest") },
      { title: "Forwarded", numeric: true, cell: (s) => number(s.forwarded) },
      { title: "", cell: (s) => [
        control(list, s, "restart", "DELETE"),
        s.state === "paused" ? control(list, s, "resume", "PUT") : control(list, s, "pause", "PUT"),
        dangerButton("Delete", `Delete shovel ${s.name}?`, async () => {
          await api("DELETE", path`/api/parameters/shovel/${s.vhost}/${s.name}`);
          list.reload();
        }),
      ] },
    ],
  });
  const add = form("Add a shovel", [
    field("Virtual host", vhostSelect()),
    field("Name", input("name", { required: true })),
    field("Source URI (amqp:// alone is this broker)", input("src-uri", { required: true, value: "amqp://" })),
    field("Source queue", input("src-queue")),
    field("Source exchange (instead of a queue)", input("src-exchange")),
    field("Source exchange routing key", input("src-exchange-key")),
    field("Destination URI (amqp, amqps, http, https)", input("dest-uri", { required: true, value: "amqp://" })),
    field("Destination queue", input("dest-queue")),
    field("Destination exchange (instead of a queue)", input("dest-exchange")),
    field("Acknowledgement mode", select("ack-mode", ACK_MODES, "on-confirm")),
  ], "Add shovel", async (values) => {
    const value = {};
    for (const [key, text] of Object.entries(values)) {
      if (key !== "vhost" && key !== "name" && text) value[key] = text;
    }
    await api("PUT", path`/api/parameters/shovel/${values.vhost}/${values.name}`, { value });
    list.reload();
    return `Shovel ${values.name} added.`;
  });
  return section("Shovels", list.element, add);
}

function federation(page) {
  const list = listView(page, {
    url: "/api/federation-links",
    empty: "No federation links: a policy with federation-upstream or federation-upstream-set starts them.",
    columns: [
      { title: "Virtual host", cell: (l) => l.vhost },
      { title: "Federated", cell: (l) => `${l.type} ${l.exchange || l.queue}` },
      { title: "Upstream", cell: (l) => l.upstream },
      { title: "URI", cell: (l) => l.uri },
      { title: "State", cell: (l) => state(l, "status") },
      { title: "Forwarded", numeric: true, cell: (l) => number(l.forwarded) },
    ],
  });
  const add = form("Add a federation upstream", [
    field("Virtual host", vhostSelect()),
    field("Name", input("name", { required: true })),
    field("URI", input("uri", { required: true, placeholder: "amqp://user:password@host/vhost" })),
    field("Upstream exchange (default: the same name)", input("exchange")),
    field("Upstream queue (default: the same name)", input("queue")),
    field("Max hops", input("max-hops", { type: "number", value: "1", min: "1" })),
  ], "Add upstream", async (values) => {
    const value = { uri: values.uri, "max-hops": Number(values["max-hops"]) };
    if (values.exchange) value.exchange = values.exchange;
    if (values.queue) value.queue = values.queue;
    await api("PUT", path`/api/parameters/federation-upstream/${values.vhost}/${values.name}`, { value });
    return `Upstream ${values.name} added: a policy with federation-upstream-set "all" federates from it.`;
  });
  return section("Federation links", list.element, add);
}

export function render(page) {
  replace(page.main, h("h1", {}, "Shovels and federation"), shovels(page), federation(page));
}

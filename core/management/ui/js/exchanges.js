// Exchanges: the list, a form to declare one, and an exchange's page with its bindings,
// a publish form and delete.

import { api, get, path } from "./api.js";
import {
  dangerButton, field, form, h, input, keyValues, link, notice, parseKeyValues, replace, section, select, statRate,
  table, textarea,
} from "./dom.js";
import { listView, REFRESH_MS, vhostSelect } from "./list.js";
import { publishForm } from "./messages.js";

const TYPES = ["direct", "fanout", "topic", "headers", "x-consistent-hash", "x-delayed-message"];

export function displayName(name) {
  return name === "" ? "(AMQP default)" : name;
}

function features(exchange) {
  return [exchange.durable ? "D" : "", exchange.auto_delete ? "AD" : "", exchange.internal ? "I" : ""]
    .filter(Boolean).join(" ");
}

export function render(page, vhost, name) {
  if (vhost !== undefined && name !== undefined) {
    exchangePage(page, vhost, name);
    return;
  }
  const list = listView(page, {
    url: "/api/exchanges",
    empty: "No exchanges.",
    columns: [
      { title: "Virtual host", cell: (x) => x.vhost },
      { title: "Name", cell: (x) => link(displayName(x.name), "exchanges", x.vhost, x.name || "amq.default") },
      { title: "Type", cell: (x) => x.type },
      { title: "Features", cell: features },
      { title: "Arguments", cell: (x) => keyValues(x.arguments) },
      { title: "Rate in", numeric: true, cell: (x) => statRate(x, "publish_in") },
      { title: "Rate out", numeric: true, cell: (x) => statRate(x, "publish_out") },
    ],
  });
  const declare = form("Add a new exchange", [
    field("Virtual host", vhostSelect()),
    field("Name", input("name", { required: true })),
    field("Type", select("type", TYPES, "direct")),
    field("Durable", h("input", { type: "checkbox", name: "durable", checked: true })),
    field("Auto delete", h("input", { type: "checkbox", name: "auto_delete" })),
    field("Internal", h("input", { type: "checkbox", name: "internal" })),
    field("Arguments (key=value per line)", textarea("arguments", { rows: 2 })),
  ], "Add exchange", async (values) => {
    await api("PUT", path`/api/exchanges/${values.vhost}/${values.name}`, {
      type: values.type, durable: values.durable, auto_delete: values.auto_delete, internal: values.internal,
      arguments: parseKeyValues(values.arguments),
    });
    list.reload();
    return `Exchange ${values.name} declared.`;
  });
  replace(page.main, h("h1", {}, "Exchanges"), h("p", { class: "hint" }, "Features: D durable, AD auto delete, I internal."),
    list.element, declare);
}

function exchangePage(page, vhost, name) {
  const shown = name === "amq.default" ? "" : name;
  const summary = h("div");
  const bindings = h("div");
  replace(page.main, h("h1", {}, `Exchange ${displayName(shown)}`), h("p", {}, `Virtual host ${vhost}`),
    summary, section("Bindings from this exchange", bindings), publishForm(vhost, shown),
    shown === "" ? null : section("Delete this exchange",
      dangerButton("Delete", `Delete exchange ${shown}?`, async () => {
        await api("DELETE", path`/api/exchanges/${vhost}/${shown}`);
        location.hash = "#/exchanges";
      })));
  page.every(REFRESH_MS, async () => {
    try {
      const exchange = await get(path`/api/exchanges/${vhost}/${name}`);
      replace(summary, table([
        { title: "Type", cell: (x) => x.type },
        { title: "Features", cell: features },
        { title: "Policy", cell: (x) => x.policy || "" },
        { title: "Arguments", cell: (x) => keyValues(x.arguments) },
        { title: "Rate in", cell: (x) => statRate(x, "publish_in") },
        { title: "Rate out", cell: (x) => statRate(x, "publish_out") },
      ], [exchange]));
      const list = await get(path`/api/exchanges/${vhost}/${name}/bindings/source`);
      replace(bindings, table([
        { title: "To", cell: (b) => b.destination_type === "queue" ? link(b.destination, "queues", vhost, b.destination) : b.destination },
        { title: "Kind", cell: (b) => b.destination_type },
        { title: "Routing key", cell: (b) => b.routing_key },
        { title: "Arguments", cell: (b) => keyValues(b.arguments) },
      ], list, "No bindings."));
    } catch (error) {
      replace(summary, notice(error.message, "error"));
    }
  });
}

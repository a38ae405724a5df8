// One queue: its counts and settings, consumers, bindings (add and remove), publish, get
// messages, purge and delete; a stream queue gets the stream browser instead of get.

import { api, get, path } from "./api.js";
import {
  dangerButton, field, form, h, input, keyValues, link, notice, number, parseKeyValues, replace, section, select,
  statRate, table, textarea, yesNo,
} from "./dom.js";
import { displayName } from "./exchanges.js";
import { REFRESH_MS } from "./list.js";
import { messageList, publishForm } from "./messages.js";
import { features } from "./queues.js";

// RabbitMQ's get modes, as its UI words them.
const ACK_MODES = [
  ["ack_requeue_true", "Nack message, requeue true"],
  ["reject_requeue_true", "Reject, requeue true"],
  ["ack_requeue_false", "Automatic ack"],
  ["reject_requeue_false", "Reject, requeue false"],
];

export function render(page, vhost, name) {
  const summary = h("div", { id: "queue-summary" });
  const consumers = h("div");
  const bindings = h("div");
  const messages = h("div", { class: "fetched" });
  const readForms = h("div");
  let isStream = null;
  const queuePath = path`/api/queues/${vhost}/${name}`;

  replace(page.main,
    h("h1", {}, `Queue ${name}`), h("p", {}, "Virtual host ", vhost),
    summary,
    section("Consumers", consumers),
    section("Bindings", bindings),
    h("div", { class: "columns" }, publishForm(vhost, "", name, refresh), readForms),
    messages,
    h("div", { class: "columns" }, bindForm(vhost, name, refresh),
      h("div", { class: "panel" }, h("h3", {}, "Purge and delete"),
        dangerButton("Purge messages", `Purge all messages of queue ${name}?`, async () => {
          await api("DELETE", `${queuePath}/contents`);
          refresh();
        }),
        deleteForm(vhost, name))));

  async function refresh() {
    let queue;
    try {
      queue = await get(queuePath);
    } catch (error) {
      replace(summary, notice(error.message, "error"));
      return;
    }
    replace(summary, queueSummary(queue));
    replace(consumers, table([
      { title: "Channel", cell: (c) => (c.channel_details || {}).name },
      { title: "Consumer tag", cell: (c) => c.consumer_tag },
      { title: "Ack required", cell: (c) => yesNo(c.ack_required) },
      { title: "Prefetch", numeric: true, cell: (c) => number(c.prefetch_count) },
      { title: "Active", cell: (c) => yesNo(c.active) },
    ], queue.consumer_details || [], "No consumers."));
    if (isStream === null) {
      isStream = queue.type === "stream";
      replace(readForms, isStream ? streamBrowser(vhost, name, messages) : getForm(queuePath, messages, refresh));
    }
    try {
      replace(bindings, bindingTable(vhost, name, await get(`${queuePath}/bindings`), refresh));
    } catch (error) {
      replace(bindings, notice(error.message, "error"));
    }
  }
  page.every(REFRESH_MS, refresh);
}

function queueSummary(queue) {
  return h("div", { class: "summary" },
    h("dl", { class: "counts" },
      [["Ready", queue.messages_ready], ["Unacked", queue.messages_unacknowledged], ["Total", queue.messages],
        ["Consumers", queue.consumers]].map(([label, value]) => [
        h("dt", {}, label), h("dd", { "data-count": label.toLowerCase() }, number(value))])),
    table([
      { title: "Type", cell: (q) => q.type },
      { title: "State", cell: (q) => q.state },
      { title: "Features", cell: features },
      { title: "Policy", cell: (q) => q.policy || "" },
      { title: "Arguments", cell: (q) => keyValues(q.arguments) },
      { title: "Incoming", cell: (q) => statRate(q, "publish") },
      { title: "Deliver / get", cell: (q) => statRate(q, "deliver_get") },
      { title: "Ack", cell: (q) => statRate(q, "ack") },
    ], [queue]));
}

function bindingTable(vhost, queue, bindings, refresh) {
  return table([
    { title: "From", cell: (b) => b.source === "" ? displayName("") : link(b.source, "exchanges", vhost, b.source) },
    { title: "Routing key", cell: (b) => b.routing_key },
    { title: "Arguments", cell: (b) => keyValues(b.arguments) },
    { title: "", cell: (b) => b.source === "" ? "(implicit)" : dangerButton("Unbind", `Remove this binding from ${b.source}?`,
      async () => {
        await api("DELETE", path`/api/bindings/${vhost}/e/${b.source}/q/${queue}/${b.properties_key}`);
        refresh();
      }) },
  ], bindings, "No bindings.");
}

function bindForm(vhost, queue, refresh) {
  return form("Add a binding to this queue", [
    field("From exchange", input("source", { required: true })),
    field("Routing key", input("routing_key")),
    field("Arguments (key=value per line)", textarea("arguments", { rows: 2 })),
  ], "Bind", async (values) => {
    await api("POST", path`/api/bindings/${vhost}/e/${values.source}/q/${queue}`, {
      routing_key: values.routing_key, arguments: parseKeyValues(values.arguments),
    });
    refresh();
    return "Binding added.";
  });
}

function getForm(queuePath, messages, refresh) {
  return form("Get messages", [
    field("Ack mode", select("ackmode", ACK_MODES, "ack_requeue_true")),
    field("Encoding", select("encoding", [["auto", "Auto string / base64"], ["base64", "base64"]], "auto")),
    field("Messages", input("count", { type: "number", min: 1, value: "1" })),
  ], "Get message(s)", async (values) => {
    const got = await api("POST", `${queuePath}/get`, {
      count: Number(values.count), ackmode: values.ackmode, encoding: values.encoding, truncate: 50000,
    });
    replace(messages, messageList(got));
    refresh();
    return got.length ? null : "Queue is empty.";
  });
}

function streamBrowser(vhost, name, messages) {
  return form("Browse the stream", [
    h("p", { class: "hint" }, "Reads messages without consuming them. Offset: first, last, next, a number, or a timestamp."),
    field("Offset", input("offset", { value: "first" })),
    field("Messages", input("count", { type: "number", min: 1, value: "10" })),
  ], "Read", async (values) => {
    const offset = /^-?\d+$/.test(values.offset) ? Number(values.offset) : values.offset;
    const got = await api("POST", path`/api/queues/${vhost}/${name}/stream`, {
      count: Number(values.count), offset, encoding: "auto", truncate: 50000,
    });
    replace(messages, messageList(got));
    return got.length ? null : "No messages from that offset.";
  });
}

function deleteForm(vhost, name) {
  return form(null, [
    field("Only if unused", h("input", { type: "checkbox", name: "if_unused" })),
    field("Only if empty", h("input", { type: "checkbox", name: "if_empty" })),
  ], "Delete queue", async (values) => {
    if (!window.confirm(`Delete queue ${name}?`)) return null;
    const query = new URLSearchParams();
    if (values.if_unused) query.set("if-unused", "true");
    if (values.if_empty) query.set("if-empty", "true");
    await api("DELETE", path`/api/queues/${vhost}/${name}` + (query.size ? `?${query}` : ""));
    location.hash = "#/queues";
    return null;
  }, { danger: true });
}

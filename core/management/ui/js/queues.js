// Queues: the list with message counts and rates, and a form to declare one.

import { api, path } from "./api.js";
import { field, form, h, input, link, number, parseKeyValues, replace, select, statRate, textarea } from "./dom.js";
import { listView, vhostSelect } from "./list.js";

export function features(queue) {
  return [queue.durable ? "D" : "", queue.auto_delete ? "AD" : "", queue.exclusive ? "Excl" : ""]
    .filter(Boolean).join(" ");
}

export function render(page) {
  const list = listView(page, {
    url: "/api/queues",
    empty: "No queues.",
    columns: [
      { title: "Virtual host", cell: (q) => q.vhost },
      { title: "Name", cell: (q) => link(q.name, "queues", q.vhost, q.name) },
      { title: "Type", cell: (q) => q.type },
      { title: "Features", cell: features },
      { title: "Policy", cell: (q) => q.policy || "" },
      { title: "State", cell: (q) => q.state },
      { title: "Consumers", numeric: true, cell: (q) => number(q.consumers) },
      { title: "Ready", numeric: true, cell: (q) => number(q.messages_ready) },
      { title: "Unacked", numeric: true, cell: (q) => number(q.messages_unacknowledged) },
      { title: "Total", numeric: true, cell: (q) => number(q.messages) },
      { title: "Incoming", numeric: true, cell: (q) => statRate(q, "publish") },
      { title: "Deliver / get", numeric: true, cell: (q) => statRate(q, "deliver_get") },
      { title: "Ack", numeric: true, cell: (q) => statRate(q, "ack") },
    ],
  });
  const declare = form("Add a new queue", [
    field("Virtual host", vhostSelect()),
    field("Type", select("type", ["classic", "quorum", "stream"], "classic")),
    field("Name", input("name", { required: true })),
    field("Durable", h("input", { type: "checkbox", name: "durable", checked: true })),
    field("Auto delete", h("input", { type: "checkbox", name: "auto_delete" })),
    field("Arguments (key=value per line, e.g. x-max-length=1000)", textarea("arguments", { rows: 2 })),
  ], "Add queue", async (values) => {
    const args = parseKeyValues(values.arguments);
    if (values.type !== "classic") args["x-queue-type"] = values.type;
    await api("PUT", path`/api/queues/${values.vhost}/${values.name}`, {
      durable: values.durable, auto_delete: values.auto_delete, arguments: args,
    });
    list.reload();
    return `Queue ${values.name} declared.`;
  });
  replace(page.main, h("h1", {}, "Queues"), h("p", { class: "hint" }, "Features: D durable, AD auto delete, Excl exclusive."),
    list.element, declare);
}

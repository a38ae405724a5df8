// Policies and operator policies: list, add or update, delete.

import { api, path } from "./api.js";
import {
  dangerButton, field, form, h, input, keyValues, parseKeyValues, replace, section, select, textarea,
} from "./dom.js";
import { listView, vhostSelect } from "./list.js";

const APPLY_TO = ["all", "queues", "classic_queues", "quorum_queues", "streams", "exchanges"];

function policyKind(page, title, kind) {
  const list = listView(page, {
    url: `/api/${kind}`,
    empty: `No ${title.toLowerCase()}.`,
    columns: [
      { title: "Virtual host", cell: (p) => p.vhost },
      { title: "Name", cell: (p) => p.name },
      { title: "Pattern", cell: (p) => p.pattern },
      { title: "Apply to", cell: (p) => p["apply-to"] },
      { title: "Definition", cell: (p) => keyValues(p.definition) },
      { title: "Priority", numeric: true, cell: (p) => p.priority },
      { title: "", cell: (p) => dangerButton("Delete", `Delete policy ${p.name}?`, async () => {
        await api("DELETE", path`/api/${kind}/${p.vhost}/${p.name}`);
        list.reload();
      }) },
    ],
  });
  const add = form(`Add or update a ${kind === "policies" ? "policy" : "operator policy"}`, [
    field("Virtual host", vhostSelect()),
    field("Name", input("name", { required: true })),
    field("Pattern (regular expression on names)", input("pattern", { required: true, value: ".*" })),
    field("Apply to", select("apply-to", APPLY_TO, "all")),
    field("Priority", input("priority", { type: "number", value: "0" })),
    field("Definition (key=value per line, e.g. max-length=1000)", textarea("definition", { rows: 3, required: true })),
  ], "Save policy", async (values) => {
    await api("PUT", path`/api/${kind}/${values.vhost}/${values.name}`, {
      pattern: values.pattern, "apply-to": values["apply-to"], priority: Number(values.priority),
      definition: parseKeyValues(values.definition),
    });
    list.reload();
    return `Policy ${values.name} saved.`;
  });
  return section(title, list.element, add);
}

export function render(page) {
  replace(page.main, h("h1", {}, "Policies"),
    policyKind(page, "User policies", "policies"),
    policyKind(page, "Operator policies", "operator-policies"));
}

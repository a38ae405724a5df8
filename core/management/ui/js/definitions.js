// Definitions: download the broker's (or one vhost's) as JSON, upload a file to import.

import { api, get, path } from "./api.js";
import { field, form, h, replace } from "./dom.js";
import { vhostSelect } from "./list.js";

function definitionsPath(vhost) {
  return vhost ? path`/api/definitions/${vhost}` : "/api/definitions";
}

export function render(page) {
  const download = form("Export definitions", [
    h("p", { class: "hint" }, "Users, virtual hosts, permissions, queues, exchanges, bindings, policies and parameters, in RabbitMQ's format."),
    field("Virtual host", vhostSelect("All virtual hosts")),
  ], "Download broker definitions", async (values) => {
    const definitions = await get(definitionsPath(values.vhost));
    const blob = new Blob([JSON.stringify(definitions, null, 2)], { type: "application/json" });
    const anchor = h("a", { href: URL.createObjectURL(blob), download: "lavin-definitions.json" });
    document.body.append(anchor);
    anchor.click();
    anchor.remove();
    setTimeout(() => URL.revokeObjectURL(anchor.href), 10000);
    return "Definitions downloaded.";
  });
  const upload = form("Import definitions", [
    h("p", { class: "hint" }, "Import adds to what the broker has; a definitions file that conflicts is refused whole."),
    field("Definitions file (JSON)", h("input", { type: "file", name: "file", accept: ".json,application/json", required: true })),
    field("Virtual host", vhostSelect("All virtual hosts")),
  ], "Upload broker definitions", async (values) => {
    let definitions;
    try {
      definitions = JSON.parse(await values.file.text());
    } catch (error) {
      throw new Error(`${values.file.name} is not JSON: ${error.message}`);
    }
    await api("POST", definitionsPath(values.vhost), definitions);
    return "Definitions imported.";
  });
  replace(page.main, h("h1", {}, "Definitions"), download, upload);
}

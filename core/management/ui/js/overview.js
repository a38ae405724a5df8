// Totals from /api/overview, and charts of message rates and queue depth from polling it.

import { get, hasTag } from "./api.js";
import { lineChart } from "./chart.js";
import { h, notice, number, rate, replace, section, table } from "./dom.js";
import { REFRESH_MS } from "./list.js";
import { nodeVitals } from "./vitals.js";

// Ten minutes of samples, kept while the tab is open so a return to the page has history.
const KEPT_SAMPLES = 120;
const history = { rates: {}, depth: {} };

const RATES = [["Publish", "publish"], ["Deliver / get", "deliver_get"], ["Acknowledge", "ack"],
  ["Redeliver", "redeliver"], ["Confirm", "confirm"]];
const DEPTHS = [["Ready", "messages_ready"], ["Unacknowledged", "messages_unacknowledged"],
  ["Total", "messages"]];
const TOTALS = [["Connections", "connections"], ["Channels", "channels"], ["Exchanges", "exchanges"],
  ["Queues", "queues"], ["Consumers", "consumers"]];

// Every node of the cluster (the one node, leader, when not clustered) from /api/nodes.
const NODE_COLUMNS = [
  { title: "Name", cell: (row) => row.name },
  { title: "Role", cell: (row) => row.cluster_role },
  { title: "In sync", cell: (row) => (row.in_sync ? "yes" : "no") },
  { title: "Lag (bytes)", numeric: true, cell: (row) => (row.replication_lag_bytes == null ? "" : number(row.replication_lag_bytes)) },
  { title: "Lag (s)", numeric: true, cell: (row) => (row.replication_lag_seconds == null ? "" : row.replication_lag_seconds.toFixed(1)) },
];

function remember(group, label, value) {
  const values = (history[group][label] ??= []);
  values.push(value);
  if (values.length > KEPT_SAMPLES) values.shift();
  return { label, values };
}

export function render(page) {
  const status = h("div");
  const totals = h("div", { class: "totals" });
  const ratesChart = lineChart("Message rates", "/s");
  const depthChart = lineChart("Queued messages", "");
  const vitals = h("div");
  const members = h("div");
  const node = h("div");
  replace(page.main, h("h1", {}, "Overview"), status, totals, vitals, members,
    h("div", { class: "charts" }, ratesChart.element, depthChart.element), node);
  // /api/nodes is for monitoring users and administrators, as in RabbitMQ.
  const seesNode = hasTag(page.user, "monitoring") || hasTag(page.user, "administrator");

  page.every(REFRESH_MS, async () => {
    let data;
    try {
      data = await get("/api/overview");
    } catch (error) {
      replace(status, notice(error.message, "error"));
      return;
    }
    replace(status);
    if (seesNode) {
      const nodes = await get("/api/nodes").catch(() => []);
      // This node's vitals: the other members of a cluster are known by their role only.
      const here = nodes.find((one) => one.name === data.node);
      replace(vitals, here ? section("Node vitals", nodeVitals(here)) : null);
      replace(members, nodes.length ? section("Nodes", table(NODE_COLUMNS, nodes)) : null);
    }
    const objects = data.object_totals || {};
    const queued = data.queue_totals || {};
    const stats = data.message_stats || {};
    replace(totals, [...TOTALS.map(([label, key]) => [label, number(objects[key])]),
      ...DEPTHS.map(([label, key]) => [`Messages ${label.toLowerCase()}`, number(queued[key])])]
      .map(([label, value]) => h("div", { class: "total" }, h("span", {}, label), h("strong", {}, value))));
    ratesChart.draw(RATES.map(([label, key]) =>
      remember("rates", label, (stats[key + "_details"] || {}).rate || 0)), rate);
    depthChart.draw(DEPTHS.map(([label, key]) => remember("depth", label, queued[key] || 0)), number);
    replace(node, section("Node", table([
      { title: "Product", cell: (row) => `${row.product_name || "Lavin"} ${row.product_version || ""}` },
      { title: "RabbitMQ compatibility", cell: (row) => row.rabbitmq_version || "" },
      { title: "Node", cell: (row) => row.node || "" },
      { title: "Listeners", cell: (row) => (row.listeners || []).map((one) => `${one.protocol} ${one.ip_address}:${one.port}`).join(", ") },
    ], [data])));
  });
}

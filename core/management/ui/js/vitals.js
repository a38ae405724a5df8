// The node's vitals from /api/nodes, as RabbitMQ's Nodes panel shows them: each resource
// against its limit, in red while its alarm is on (or, for file descriptors and sockets,
// once nearly all are used).

import { bytes, h, number } from "./dom.js";

// RabbitMQ's panel turns these red at 95% of the cap; so does this one.
const NEARLY_ALL = 0.95;

function uptime(ms) {
  const seconds = Math.floor((ms || 0) / 1000);
  const days = Math.floor(seconds / 86400);
  const hours = Math.floor((seconds % 86400) / 3600);
  const minutes = Math.floor((seconds % 3600) / 60);
  if (days) return `${days}d ${hours}h`;
  if (hours) return `${hours}h ${minutes}m`;
  return `${minutes}m ${seconds % 60}s`;
}

function vital(name, label, value, limit, alarm) {
  return h("div", { class: alarm ? "vital alarm" : "vital", "data-vital": name },
    h("span", {}, label), h("strong", {}, value), h("small", {}, alarm ? `${limit} (alarm)` : limit));
}

function nearlyAll(used, total) {
  return total > 0 && used >= total * NEARLY_ALL;
}

export function nodeVitals(node) {
  return h("div", { class: "totals vitals" },
    vital("memory", "Memory", bytes(node.mem_used), `high watermark ${bytes(node.mem_limit)}`, node.mem_alarm),
    vital("disk", "Disk free", bytes(node.disk_free), `limit ${bytes(node.disk_free_limit)}`, node.disk_free_alarm),
    vital("fd", "File descriptors", number(node.fd_used), `of ${number(node.fd_total)}`,
      nearlyAll(node.fd_used, node.fd_total)),
    vital("sockets", "Sockets", number(node.sockets_used), `of ${number(node.sockets_total)}`,
      nearlyAll(node.sockets_used, node.sockets_total)),
    vital("uptime", "Uptime", uptime(node.uptime), node.name || "", false),
    vital("lag", "Event loop lag", `${(node.event_loop_lag || 0).toFixed(1)} ms`, "at the last sample", false));
}

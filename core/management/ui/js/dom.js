// Elements are built from data as text nodes, never parsed from markup: a name that holds
// HTML is shown as it is written.

export function h(tag, attrs, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) element.addEventListener(key.slice(2), value);
    else if (key === "value") element.value = value;
    else element.setAttribute(key, value === true ? "" : String(value));
  }
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(element, child);
    else element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function replace(element, ...children) {
  element.replaceChildren();
  append(element, children);
}

// A URL fragment from path parts, each percent-encoded: `#/queues/%2F/name`.
export function link(text, ...parts) {
  return h("a", { href: "#/" + parts.map(encodeURIComponent).join("/") }, text);
}

export function number(value) {
  return typeof value === "number" ? value.toLocaleString("en") : "";
}

export function rate(value) {
  return typeof value === "number" ? value.toFixed(value < 10 && value !== 0 ? 1 : 0) + "/s" : "";
}

// RabbitMQ's `message_stats.<name>_details.rate`, or nothing before the broker reports it.
export function statRate(item, name) {
  const details = item && item.message_stats && item.message_stats[name + "_details"];
  return details ? rate(details.rate) : "";
}

export function bytes(value) {
  if (typeof value !== "number") return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let index = 0;
  while (value >= 1024 && index < units.length - 1) {
    value /= 1024;
    index += 1;
  }
  return (index ? value.toFixed(1) : String(value)) + " " + units[index];
}

export function yesNo(value) {
  return value ? "yes" : "no";
}

// Arguments, properties, a definition: `key: value` per line, values as JSON.
export function keyValues(object) {
  const entries = Object.entries(object || {});
  if (!entries.length) return "";
  return h("dl", { class: "kv" }, entries.map(([key, value]) => [
    h("dt", {}, key),
    h("dd", {}, typeof value === "string" ? value : JSON.stringify(value)),
  ]));
}

export function table(columns, rows, emptyText = "Nothing to show.") {
  if (!rows.length) return h("p", { class: "empty" }, emptyText);
  return h("table", {},
    h("thead", {}, h("tr", {}, columns.map((column) => h("th", { class: column.numeric ? "num" : null }, column.title)))),
    h("tbody", {}, rows.map((row) => h("tr", {}, columns.map((column) =>
      h("td", { class: column.numeric ? "num" : null }, column.cell(row)))))));
}

export function section(title, ...children) {
  return h("section", {}, h("h2", {}, title), children);
}

export function notice(text, kind = "info") {
  return h("p", { class: "notice " + kind, role: kind === "error" ? "alert" : "status" }, text);
}

// A labelled form field; `input` is any element with a name.
export function field(label, input) {
  return h("label", { class: "field" }, h("span", {}, label), input);
}

export function input(name, attrs = {}) {
  return h("input", { name, type: "text", ...attrs });
}

export function select(name, options, selected) {
  return h("select", { name }, options.map((option) => {
    const [value, text] = Array.isArray(option) ? option : [option, option];
    return h("option", { value, selected: value === selected }, text);
  }));
}

export function textarea(name, attrs = {}) {
  return h("textarea", { name, rows: 4, ...attrs });
}

// A form whose submit runs `action(values)`; the outcome (or the API's reason) shows under it.
export function form(title, fields, submitText, action, { danger = false } = {}) {
  const status = h("div", { class: "form-status" });
  const element = h("form", { class: "panel" }, title ? h("h3", {}, title) : null, fields,
    h("button", { type: "submit", class: danger ? "danger" : null }, submitText), status);
  element.addEventListener("submit", async (event) => {
    event.preventDefault();
    const values = Object.fromEntries(new FormData(element).entries());
    for (const box of element.querySelectorAll("input[type=checkbox]")) values[box.name] = box.checked;
    try {
      const message = await action(values, element);
      replace(status, message ? notice(message, "ok") : null);
    } catch (error) {
      replace(status, notice(error.message, "error"));
    }
  });
  return element;
}

// `key=value` lines into an object; numbers, true and false keep their JSON type.
export function parseKeyValues(text) {
  const result = {};
  for (const line of (text || "").split("\n")) {
    if (!line.trim()) continue;
    const at = line.indexOf("=");
    if (at < 1) throw new Error(`"${line.trim()}" is not key=value`);
    const key = line.slice(0, at).trim();
    const raw = line.slice(at + 1).trim();
    result[key] = /^-?\d+(\.\d+)?$/.test(raw) || raw === "true" || raw === "false" ? JSON.parse(raw) : raw;
  }
  return result;
}

// A button that asks before it acts, and says why when the API refuses.
export function dangerButton(text, question, action) {
  return h("button", { type: "button", class: "danger", onclick: async () => {
    if (!window.confirm(question)) return;
    try {
      await action();
    } catch (error) {
      if (error.status !== 401) window.alert(error.message); // a 401 has ended the session already
    }
  } }, text);
}

// A list page's table: a name filter, pages of 100, and a refresh every few seconds, with
// RabbitMQ's list parameters (page, page_size, name, use_regex).

import { get } from "./api.js";
import { h, notice, replace, table } from "./dom.js";

export const REFRESH_MS = 5000;
const PAGE_SIZE = 100;

export function listView(page, { url, columns, empty }) {
  let pageNumber = 1;
  const filter = h("input", { type: "search", placeholder: "Filter by name (regular expression)", class: "filter" });
  const body = h("div", { class: "list-body" });
  const pager = h("div", { class: "pager" });

  async function load() {
    const query = new URLSearchParams({ page: pageNumber, page_size: PAGE_SIZE });
    if (filter.value) {
      query.set("name", filter.value);
      query.set("use_regex", "true");
    }
    try {
      const data = await get(url + (url.includes("?") ? "&" : "?") + query);
      const items = Array.isArray(data) ? data : data.items;
      replace(body, table(columns, items, empty));
      showPager(Array.isArray(data) ? null : data);
    } catch (error) {
      replace(body, notice(error.message, "error"));
    }
  }

  function showPager(data) {
    if (!data || data.page_count <= 1) {
      replace(pager, data ? `${data.filtered_count} of ${data.total_count}` : null);
      return;
    }
    const go = (number) => () => {
      pageNumber = number;
      load();
    };
    replace(pager,
      h("button", { type: "button", disabled: data.page <= 1, onclick: go(data.page - 1) }, "Previous"),
      ` page ${data.page} of ${data.page_count} (${data.filtered_count} of ${data.total_count}) `,
      h("button", { type: "button", disabled: data.page >= data.page_count, onclick: go(data.page + 1) }, "Next"));
  }

  filter.addEventListener("input", () => {
    pageNumber = 1;
    load();
  });
  page.every(REFRESH_MS, load);
  return { element: h("div", { class: "list" }, filter, body, pager), reload: load };
}

// A <select name="vhost"> of the vhosts the user may see; `allLabel` adds a first, empty choice.
export function vhostSelect(allLabel) {
  const element = h("select", { name: "vhost" }, allLabel ? h("option", { value: "" }, allLabel) : null);
  get("/api/vhosts?columns=name").then(
    (vhosts) => element.append(...vhosts.map((vhost) => h("option", { value: vhost.name }, vhost.name))),
    () => {}); // a refusal ends the session (api.js); the page shows other errors itself
  return element;
}

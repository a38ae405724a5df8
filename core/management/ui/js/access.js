// Virtual hosts, users and permissions (administrators only, as in RabbitMQ).

import { api, get, path } from "./api.js";
import {
  dangerButton, field, form, h, input, notice, number, replace, section, statRate, table,
} from "./dom.js";
import { listView, REFRESH_MS, vhostSelect } from "./list.js";

function tagList(tags) {
  return Array.isArray(tags) ? tags.join(", ") : tags || "";
}

export function vhosts(page) {
  const list = listView(page, {
    url: "/api/vhosts",
    empty: "No virtual hosts.",
    columns: [
      { title: "Name", cell: (v) => v.name },
      { title: "Description", cell: (v) => v.description || "" },
      { title: "Tags", cell: (v) => tagList(v.tags) },
      { title: "Ready", numeric: true, cell: (v) => number(v.messages_ready) },
      { title: "Unacked", numeric: true, cell: (v) => number(v.messages_unacknowledged) },
      { title: "Total", numeric: true, cell: (v) => number(v.messages) },
      { title: "Publish", numeric: true, cell: (v) => statRate(v, "publish") },
      { title: "", cell: (v) => dangerButton("Delete", `Delete virtual host ${v.name} and everything in it?`, async () => {
        await api("DELETE", path`/api/vhosts/${v.name}`);
        list.reload();
      }) },
    ],
  });
  const add = form("Add a virtual host", [
    field("Name", input("name", { required: true })),
    field("Description", input("description")),
    field("Tags (comma-separated)", input("tags")),
  ], "Add virtual host", async (values) => {
    await api("PUT", path`/api/vhosts/${values.name}`, { description: values.description, tags: values.tags });
    list.reload();
    return `Virtual host ${values.name} added.`;
  });
  replace(page.main, h("h1", {}, "Virtual hosts"), list.element, add);
}

export function users(page) {
  const userList = listView(page, {
    url: "/api/users",
    empty: "No users.",
    columns: [
      { title: "Name", cell: (u) => u.name },
      { title: "Tags", cell: (u) => tagList(u.tags) },
      { title: "Password", cell: (u) => (u.password_hash ? "set" : "none") },
      { title: "", cell: (u) => dangerButton("Delete", `Delete user ${u.name}?`, async () => {
        await api("DELETE", path`/api/users/${u.name}`);
        userList.reload();
      }) },
    ],
  });
  const addUser = form("Add or update a user", [
    field("Name", input("name", { required: true })),
    field("Password (empty: none, log in by other means)", input("password", { type: "password", autocomplete: "new-password" })),
    field("Tags (comma-separated: administrator, monitoring, policymaker, management)", input("tags")),
  ], "Save user", async (values) => {
    const body = { tags: values.tags };
    if (values.password) body.password = values.password;
    await api("PUT", path`/api/users/${values.name}`, body);
    userList.reload();
    return `User ${values.name} saved.`;
  });
  const permissions = h("div");
  const refreshPermissions = async () => {
    try {
      const rows = await get("/api/permissions");
      replace(permissions, table([
        { title: "User", cell: (p) => p.user },
        { title: "Virtual host", cell: (p) => p.vhost },
        { title: "Configure", cell: (p) => p.configure },
        { title: "Write", cell: (p) => p.write },
        { title: "Read", cell: (p) => p.read },
        { title: "", cell: (p) => dangerButton("Clear", `Clear ${p.user}'s permissions on ${p.vhost}?`, async () => {
          await api("DELETE", path`/api/permissions/${p.vhost}/${p.user}`);
          refreshPermissions();
        }) },
      ], rows, "No permissions."));
    } catch (error) {
      replace(permissions, notice(error.message, "error"));
    }
  };
  const setPermission = form("Set permissions", [
    field("User", input("user", { required: true })),
    field("Virtual host", vhostSelect()),
    field("Configure regexp", input("configure", { value: ".*" })),
    field("Write regexp", input("write", { value: ".*" })),
    field("Read regexp", input("read", { value: ".*" })),
  ], "Set permissions", async (values) => {
    await api("PUT", path`/api/permissions/${values.vhost}/${values.user}`, {
      configure: values.configure, write: values.write, read: values.read,
    });
    refreshPermissions();
    return `Permissions of ${values.user} on ${values.vhost} set.`;
  });
  page.every(REFRESH_MS, refreshPermissions);
  replace(page.main, h("h1", {}, "Users"), userList.element, addUser,
    section("Permissions", permissions, setPermission));
}

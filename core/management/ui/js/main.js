// The page's frame: the login form, the navigation, and the router that shows a page for
// the URL fragment (`#/queues/%2F/orders`). A page module's `render(page, ...parts)`
// builds its content into `page.main`, may poll with `page.every`, and knows `page.user`.

import { ApiError, currentUser, hasTag, login, logout } from "./api.js";
import { field, h, input, notice, replace } from "./dom.js";
import * as access from "./access.js";
import * as clients from "./clients.js";
import * as definitions from "./definitions.js";
import * as exchanges from "./exchanges.js";
import * as overview from "./overview.js";
import * as links from "./links.js";
import * as policies from "./policies.js";
import * as queue from "./queue.js";
import * as queues from "./queues.js";

const PAGES = {
  "": overview.render,
  connections: clients.connections,
  channels: clients.channels,
  consumers: clients.consumers,
  exchanges: exchanges.render,
  queues: queues.render,
  queue: queue.render,
  vhosts: access.vhosts,
  users: access.users,
  policies: policies.render,
  definitions: definitions.render,
  shovels: links.render,
};

const main = document.getElementById("main");
let timers = [];

function stopTimers() {
  timers.forEach(clearInterval);
  timers = [];
}

function pageContext(user) {
  return {
    main,
    user,
    every(ms, action) {
      action();
      timers.push(setInterval(action, ms));
    },
  };
}

function showLogin(message) {
  stopTimers();
  document.getElementById("nav").hidden = true;
  document.getElementById("session").hidden = true;
  const status = h("div", { class: "form-status" }, message ? notice(message, "error") : null);
  const loginForm = h("form", { class: "panel login", id: "login" },
    h("h1", {}, "Log in"),
    field("Username", input("username", { autocomplete: "username", required: true })),
    field("Password", input("password", { type: "password", autocomplete: "current-password" })),
    h("button", { type: "submit" }, "Log in"),
    status);
  loginForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const values = new FormData(loginForm);
    try {
      await login(values.get("username"), values.get("password"));
      route();
    } catch (error) {
      replace(status, notice(loginFailure(error), "error"));
    }
  });
  replace(main, loginForm);
  loginForm.querySelector("input").focus();
}

// What went wrong, in words: the API's reason is a code ("Not_Authorized") or a phrase.
function loginFailure(error) {
  if (error instanceof ApiError && error.status === 401 && error.message === "Not_Authorized") {
    return "Login failed: the username or password is not right.";
  }
  if (!(error instanceof ApiError)) return `Login failed: the broker did not answer (${error.message}).`;
  return `Login failed: ${error.message}`;
}

function showFrame(user) {
  const nav = document.getElementById("nav");
  nav.hidden = false;
  for (const anchor of nav.querySelectorAll("a[data-tags]")) {
    anchor.hidden = !anchor.dataset.tags.split(" ").some((tag) => hasTag(user, tag));
  }
  document.getElementById("session").hidden = false;
  document.getElementById("who").textContent = `User ${user.name}`;
  const current = location.hash.split("/")[1] || "";
  for (const anchor of nav.querySelectorAll("a")) {
    anchor.classList.toggle("active", (anchor.getAttribute("href").split("/")[1] || "") === current);
  }
}

function route() {
  stopTimers();
  const user = currentUser();
  if (!user) {
    showLogin();
    return;
  }
  showFrame(user);
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  // `#/queues/<vhost>/<name>` is a queue's own page.
  const name = parts[0] === "queues" && parts.length === 3 ? "queue" : parts[0];
  const render = PAGES[name];
  replace(main);
  if (render) render(pageContext(user), ...parts.slice(1));
  else replace(main, notice("No such page.", "error"));
}

document.getElementById("logout").addEventListener("click", () => {
  logout();
  location.hash = "#/";
});
window.addEventListener("lavin:logout", (event) => showLogin(event.detail && `Logged out: ${event.detail}`));
window.addEventListener("hashchange", route);
route();

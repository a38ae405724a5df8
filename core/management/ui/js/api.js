// The management API, with the credentials the user logged in with (HTTP Basic, kept in
// this tab's sessionStorage only). A 401 ends the session: the page returns to the login form.

const CREDENTIALS_KEY = "lavin.credentials";
const USER_KEY = "lavin.user";

export class ApiError extends Error {
  constructor(status, reason) {
    super(reason);
    this.status = status;
  }
}

// `/api/queues/${vhost}/${name}` with each value percent-encoded (`/` is `%2F`).
export function path(strings, ...values) {
  return strings.reduce((result, text, index) =>
    result + text + (index < values.length ? encodeURIComponent(values[index]) : ""), "");
}

export function currentUser() {
  const stored = sessionStorage.getItem(USER_KEY);
  return stored && sessionStorage.getItem(CREDENTIALS_KEY) ? JSON.parse(stored) : null;
}

function encodeCredentials(username, password) {
  const bytes = new TextEncoder().encode(`${username}:${password}`);
  return btoa(String.fromCharCode(...bytes));
}

async function send(method, url, credentials, body, headers = {}) {
  const response = await fetch(url, {
    method,
    // No browser login prompt and no cookies: the header below is the only credential.
    credentials: "omit",
    headers: {
      Authorization: "Basic " + credentials,
      ...(body === undefined ? {} : { "Content-Type": "application/json" }),
      ...headers,
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = text;
  }
  if (!response.ok) {
    const reason = data && data.reason ? data.reason : `${response.status} ${response.statusText}`;
    throw new ApiError(response.status, reason);
  }
  return data;
}

export async function login(username, password) {
  const credentials = encodeCredentials(username, password);
  const who = await send("GET", "/api/whoami", credentials);
  sessionStorage.setItem(CREDENTIALS_KEY, credentials);
  sessionStorage.setItem(USER_KEY, JSON.stringify(who));
  return who;
}

export function logout(reason) {
  sessionStorage.removeItem(CREDENTIALS_KEY);
  sessionStorage.removeItem(USER_KEY);
  window.dispatchEvent(new CustomEvent("lavin:logout", { detail: reason || "" }));
}

export async function api(method, url, body, headers) {
  const credentials = sessionStorage.getItem(CREDENTIALS_KEY);
  if (!credentials) {
    logout();
    throw new ApiError(401, "Not logged in");
  }
  try {
    return await send(method, url, credentials, body, headers);
  } catch (error) {
    if (error instanceof ApiError && error.status === 401 && !(await stillValid(credentials))) logout(error.message);
    throw error;
  }
}

// A 401 is also RabbitMQ's answer to a user whose tags do not allow a request: the session
// ends only when the credentials themselves no longer log in.
async function stillValid(credentials) {
  try {
    await send("GET", "/api/whoami", credentials);
    return true;
  } catch (error) {
    return !(error instanceof ApiError && error.status === 401);
  }
}

export const get = (url) => api("GET", url);

// Whether the user has a tag (RabbitMQ sends tags as a list, older versions as a string).
export function hasTag(user, tag) {
  const tags = Array.isArray(user.tags) ? user.tags : String(user.tags || "").split(",");
  return tags.includes(tag);
}

// Calls to the broker: credentials for this tab only, and the outcomes a page must tell apart
// (the broker unreachable, sign-in needed, an action not allowed).

const CREDENTIALS_KEY = "wharf.credentials";

/** A failed call. `unreachable`: no answer or a 5xx; `status`: the HTTP status, if any. */
export class ApiError extends Error {
  constructor(message, { status = null, unreachable = false, body = null } = {}) {
    super(message);
    this.status = status;
    this.unreachable = unreachable;
    this.body = body;
  }
}

const listeners = { signInNeeded: [], forbidden: [] };

/** `signInNeeded(rejected)`: a call answered 401 (`rejected`: credentials were sent);
 * `forbidden(text)`: a call answered 403, `text` names the action. */
export function on(event, listener) {
  listeners[event].push(listener);
}

// -- credentials: sessionStorage only, so they live as long as this tab --------------------------

export function credentials() {
  try {
    const stored = JSON.parse(sessionStorage.getItem(CREDENTIALS_KEY));
    return stored && stored.accessKey ? stored : null;
  } catch {
    return null;
  }
}

export function saveCredentials(accessKey, secretKey) {
  sessionStorage.setItem(CREDENTIALS_KEY, JSON.stringify({ accessKey, secretKey }));
}

export function clearCredentials() {
  sessionStorage.removeItem(CREDENTIALS_KEY);
}

function base64(text) {
  let binary = "";
  for (const byte of new TextEncoder().encode(text)) binary += String.fromCharCode(byte);
  return btoa(binary);
}

/** `?token=` for WebSocket URLs: browsers cannot set headers on a WebSocket handshake. */
export function socketToken() {
  const stored = credentials();
  if (!stored) return null;
  return base64(`${stored.accessKey}:${stored.secretKey}`).replaceAll("+", "-").replaceAll("/", "_");
}

// -- fetch ---------------------------------------------------------------------------------------

/**
 * One JSON call. `action` names what the user asked for ("delete topic 'orders'") in a 403's message.
 * Throws ApiError.
 */
export async function api(path, { action = "this", method = "GET", json, headers = {} } = {}) {
  const stored = credentials();
  const sent = new Headers(headers);
  if (stored) sent.set("Authorization", `Basic ${base64(`${stored.accessKey}:${stored.secretKey}`)}`);
  const init = { method, headers: sent, cache: "no-store", credentials: "omit" };
  // credentials "omit": a 401 with WWW-Authenticate: Basic on a request that may carry credentials is
  // what makes a browser open its own sign-in popup; the console signs in with its own form instead.
  if (json !== undefined) {
    sent.set("Content-Type", "application/json");
    init.body = JSON.stringify(json);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (error) {
    throw new ApiError(`no answer (${error.message})`, { unreachable: true });
  }
  const text = await response.text();
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = null; // a proxy's HTML error page, say
  }
  if (response.ok) return body;
  const detail = body && body.message ? `${body.error_code}: ${body.message}` : `HTTP ${response.status}`;
  if (response.status === 401) {
    if (stored) clearCredentials();
    for (const listener of listeners.signInNeeded) listener(Boolean(stored));
    throw new ApiError(`sign-in needed (${detail})`, { status: 401, body });
  }
  if (response.status === 403) {
    const who = stored ? ` as ${stored.accessKey}` : "";
    const message = `Not allowed${who}: ${action} (${detail})`;
    for (const listener of listeners.forbidden) listener(message);
    throw new ApiError(message, { status: 403, body });
  }
  throw new ApiError(detail, { status: response.status, unreachable: response.status >= 500, body });
}

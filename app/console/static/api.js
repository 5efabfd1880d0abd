// Calls to the broker through @wharf/client (clients/js, its built module copied into
// vendor/wharf-client/ by its `npm run build`): the credentials of this tab, and the outcomes a page
// must tell apart (the broker unreachable, sign-in needed, an action not allowed).
import { WharfClient, WharfError, subscribe } from "./vendor/wharf-client/index.js";

const CREDENTIALS_KEY = "wharf.credentials";

// credentials "omit": a 401 with WWW-Authenticate: Basic on a request that may carry credentials is
// what makes a browser open its own sign-in popup; the console signs in with its own form instead.
// cache "no-store": every refresh asks the broker.
const REQUEST_INIT = Object.freeze({ credentials: "omit", cache: "no-store" });

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

// -- the client --------------------------------------------------------------------------------

let current = { key: null, client: null };

/** The client of this page's broker with `stored` credentials (sent as Basic auth, and as `token`
 * on WebSocket URLs: browsers cannot set headers on a WebSocket handshake). */
function clientFor(stored) {
  const key = stored ? JSON.stringify([stored.accessKey, stored.secretKey]) : "";
  if (current.key !== key) {
    const options = { url: location.origin, requestInit: REQUEST_INIT };
    if (stored) options.credentials = { accessKey: stored.accessKey, secretKey: stored.secretKey };
    current = { key, client: new WharfClient(options) };
  }
  return current.client;
}

/** What the broker said, for a message: `40402: topic 'x' not found`, or `HTTP 502`. */
function detailOf(error) {
  return error.errorCode ? `${error.errorCode}: ${error.message}` : error.message;
}

/** The ApiError for a WharfError; a 401 forgets the credentials sent, and a 401 or 403 is told to
 * the listeners. */
function refusal(error, action, stored) {
  if (error.status === 401) {
    // A call sent before a sign-in (or with credentials since replaced) says nothing of the ones
    // kept now: only a refusal of these clears them and asks again.
    if (JSON.stringify(credentials()) === JSON.stringify(stored)) {
      if (stored) clearCredentials();
      for (const listener of listeners.signInNeeded) listener(Boolean(stored));
    }
    return new ApiError(`sign-in needed (${detailOf(error)})`, { status: 401, body: error.body });
  }
  if (error.status === 403) {
    const who = stored ? ` as ${stored.accessKey}` : "";
    const message = `Not allowed${who}: ${action} (${detailOf(error)})`;
    for (const listener of listeners.forbidden) listener(message);
    return new ApiError(message, { status: 403, body: error.body });
  }
  if (error.status === 0) return new ApiError(error.message, { unreachable: true });
  return new ApiError(detailOf(error), { status: error.status, unreachable: error.status >= 500, body: error.body });
}

/**
 * One call to the broker: `call(client)`, a WharfClient with this tab's credentials. `action` names
 * what the user asked for ("delete topic orders") in a 403's message. Throws ApiError.
 */
export async function api(action, call) {
  const stored = credentials();
  try {
    return await call(clientFor(stored));
  } catch (error) {
    throw error instanceof WharfError ? refusal(error, action, stored) : error;
  }
}

/**
 * A subscription (the client's subscribe(), options as it takes them) with this tab's credentials.
 * `onEnd(error)` is called with the WharfError that ended it, before a 401 or 403 among them is told
 * to the listeners; a subscription closed by `close()` calls nothing.
 */
export function tail(topic, { onEnd, ...options }) {
  const stored = credentials();
  const subscription = subscribe({ ...options, client: clientFor(stored), topic });
  subscription.done.catch((error) => {
    onEnd(error);
    if (error instanceof WharfError) refusal(error, `tail ${topic}`, stored);
  });
  return subscription;
}

import { WebSocket } from "ws";

export { WebSocket };

let counter = 0;
/** A topic (or group) name unique to this run. */
export function unique(prefix) {
  counter += 1;
  return `${prefix}-${process.pid}-${Date.now().toString(36)}-${counter}`;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Wait for `predicate()` to be true, polling; throws after `timeoutMs`. */
export async function eventually(predicate, { timeoutMs = 10000, intervalMs = 20, what = "a condition" } = {}) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await predicate()) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(intervalMs);
  }
}

/** `ws`'s WebSocket, remembering every socket it opens (so a test can cut one). */
export function trackingWebSocket() {
  const sockets = [];
  class Tracked extends WebSocket {
    constructor(...args) {
      super(...args);
      sockets.push(this);
    }
  }
  return { WebSocket: Tracked, sockets };
}

/** Take `count` messages from a subscription, failing after `timeoutMs`. */
export async function take(subscription, count, { timeoutMs = 20000, ack = true } = {}) {
  const taken = [];
  const deadline = Date.now() + timeoutMs;
  while (taken.length < count) {
    const left = deadline - Date.now();
    if (left <= 0) throw new Error(`took ${taken.length} of ${count} messages before the timeout`);
    const batch = await subscription.receive(count - taken.length, Math.min(left, 1000));
    for (const message of batch) {
      if (ack) message.ack();
      taken.push(message);
    }
  }
  return taken;
}

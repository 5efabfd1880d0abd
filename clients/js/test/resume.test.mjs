// Losing the socket mid-stream, and the broker restarting: the subscription opens a new socket and
// resumes without losing a message, repeating at most what was not acknowledged.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { WharfClient, subscribe } from "../dist/index.js";
import { Broker, sharedBroker } from "./helpers/broker.mjs";
import { WebSocket, eventually, sleep, take, trackingWebSocket, unique } from "./helpers/util.mjs";

let broker;
let client;

before(async () => {
  broker = await sharedBroker();
  client = new WharfClient(broker.url);
});
after(async () => {
  await broker.release();
});

async function produceSpread(target, topic, from, count, queues) {
  for (let start = from; start < from + count; start += 250) {
    const batch = [];
    for (let i = start; i < Math.min(from + count, start + 250); i++) {
      batch.push({ body: `m-${i}`, queue_id: i % queues });
    }
    await target.produce(topic, batch);
  }
}

/**
 * Consume until every offset below `perQueue` of each queue was seen, acknowledging each message
 * `lag` messages after it was taken (so some are always unacknowledged), calling `cut` once after
 * `cutAfter` messages. Returns what was taken, and what was acknowledged before the cut.
 */
async function consumeWithCut(subscription, { queues, perQueue, cutAfter, cut, lag = 5, timeoutMs = 30000 }) {
  const taken = [];
  const held = [];
  const seen = new Set();
  const ackedBeforeCut = new Set();
  let cutDone = false;
  const ack = (message) => {
    message.ack();
    if (!cutDone) ackedBeforeCut.add(`${message.queue_id}:${message.queue_offset}`);
  };
  const deadline = Date.now() + timeoutMs;
  while (seen.size < queues * perQueue) {
    assert.ok(Date.now() < deadline, `saw ${seen.size} of ${queues * perQueue} messages before the timeout`);
    const batch = await subscription.receive(64, 500);
    for (const message of batch) {
      taken.push(message);
      seen.add(`${message.queue_id}:${message.queue_offset}`);
      held.push(message);
      while (held.length > lag) ack(held.shift());
      if (!cutDone && taken.length >= cutAfter) {
        cutDone = true;
        await cut();
      }
    }
    if (!batch.length) while (held.length) ack(held.shift());
  }
  for (const message of held) ack(message);
  return { taken, ackedBeforeCut };
}

/** Nothing lost, each queue first seen in order, and nothing acknowledged before the cut came again. */
function checkResumed(taken, ackedBeforeCut, queues, perQueue) {
  const copies = new Map();
  const firstSeen = new Map();
  for (const message of taken) {
    const key = `${message.queue_id}:${message.queue_offset}`;
    if (!copies.has(key)) copies.set(key, []);
    copies.get(key).push(message);
    assert.equal(message.body, `m-${message.queue_offset * queues + message.queue_id}`);
    if (!firstSeen.has(message.queue_id)) firstSeen.set(message.queue_id, []);
    if (copies.get(key).length === 1) firstSeen.get(message.queue_id).push(message.queue_offset);
  }
  for (let queue = 0; queue < queues; queue++) {
    assert.deepEqual(firstSeen.get(queue), Array.from({ length: perQueue }, (_, i) => i), `queue ${queue}`);
  }
  const repeated = [...copies].filter(([, list]) => list.length > 1);
  for (const [key, list] of repeated) {
    assert.ok(!ackedBeforeCut.has(key), `${key} came again though it was acknowledged before the cut`);
    assert.equal(list.length, 2, `${key} came ${list.length} times`);
    assert.ok(list[1].connection > list[0].connection, `${key} came again on the same socket`);
  }
  return repeated.length;
}

describe("resume after the socket is cut", () => {
  for (const format of ["json", "binary"]) {
    test(`with a group: from the committed offsets, repeating only the unacknowledged (${format})`, async () => {
      const queues = 2;
      const perQueue = 500;
      const topic = unique("cut");
      const group = unique("g");
      await client.createTopic(topic, { queues });
      await produceSpread(client, topic, 0, queues * perQueue, queues);
      const { WebSocket: Tracked, sockets } = trackingWebSocket();
      const reconnects = [];
      const subscription = subscribe({
        client,
        topic,
        group,
        from: "first",
        credit: 64,
        format,
        WebSocket: Tracked,
        onReconnect: (info) => reconnects.push(info),
      });
      try {
        const { taken, ackedBeforeCut } = await consumeWithCut(subscription, {
          queues,
          perQueue,
          cutAfter: 300,
          cut: async () => sockets.at(-1).terminate(), // the TCP connection drops: no close frame
        });
        assert.equal(sockets.length, 2, "one new socket");
        assert.equal(subscription.reconnects, 1);
        assert.equal(reconnects[0].code, 1006);
        const repeats = checkResumed(taken, ackedBeforeCut, queues, perQueue);
        assert.ok(repeats <= 64 + 5, `${repeats} repeats: at most what was in flight`);
        await eventually(
          () => subscription.committed.get(0) === perQueue && subscription.committed.get(1) === perQueue,
          { what: "everything committed" },
        );
      } finally {
        await subscription.close();
      }
    });
  }

  test("without a group: after the last message received, the gap pulled over HTTP", async () => {
    const queues = 2;
    const topic = unique("cut-alone");
    await client.createTopic(topic, { queues });
    await produceSpread(client, topic, 0, 600, queues);
    const { WebSocket: Tracked, sockets } = trackingWebSocket();
    const subscription = subscribe({
      client,
      topic,
      from: "first",
      credit: 50,
      WebSocket: Tracked,
      reconnect: { initialDelayMs: 300, maxDelayMs: 300 },
    });
    try {
      const { taken } = await consumeWithCut(subscription, {
        queues,
        perQueue: 500,
        cutAfter: 200,
        // Cut, then store more while no socket is open: the new socket starts at the end, so
        // these are pulled.
        cut: async () => {
          sockets.at(-1).terminate();
          await produceSpread(client, topic, 600, 400, queues);
        },
      });
      const keys = taken.map((m) => `${m.queue_id}:${m.queue_offset}`);
      assert.equal(new Set(keys).size, keys.length, "no message twice");
      checkResumed(taken, new Set(), queues, 500);
      assert.equal(taken.length, 1000);
      assert.equal(subscription.reconnects, 1);
      // Still live after the catch-up: new messages come over the socket.
      await produceSpread(client, topic, 1000, 10, queues);
      const more = await take(subscription, 10);
      assert.deepEqual(more.map((m) => m.body).sort(), Array.from({ length: 10 }, (_, i) => `m-${1000 + i}`).sort());
    } finally {
      await subscription.close();
    }
  });

  test("acks taken before a cut are not lost: repeats are acknowledged again, not handed out", async () => {
    // Ack everything, cut at once (the last acks may not have reached the broker), and check that
    // the new socket hands out nothing that was acknowledged.
    const topic = unique("cut-acked");
    const group = unique("g");
    await client.createTopic(topic, { queues: 1 });
    await produceSpread(client, topic, 0, 200, 1);
    const { WebSocket: Tracked, sockets } = trackingWebSocket();
    const subscription = subscribe({ client, topic, group, from: "first", credit: 100, WebSocket: Tracked, flushDelayMs: 1000 });
    try {
      const first = await take(subscription, 100); // acked, the acks held back by flushDelayMs
      sockets.at(-1).terminate();
      const rest = await take(subscription, 100);
      assert.deepEqual(
        [...first, ...rest].map((m) => m.queue_offset),
        Array.from({ length: 200 }, (_, i) => i),
      );
      subscription.flush();
      await eventually(() => subscription.committed.get(0) === 200, { what: "commit 200" });
    } finally {
      await subscription.close();
    }
  });
});

describe("resume after the broker restarts", () => {
  let own;
  before(async () => {
    own = await Broker.start();
  });
  after(async () => {
    await own?.dispose();
  });

  test("a group subscriber reconnects with back-off and resumes at the committed offsets", async () => {
    const ownClient = new WharfClient(own.url);
    const queues = 2;
    const topic = unique("restart");
    const group = unique("g");
    await ownClient.createTopic(topic, { queues });
    await produceSpread(ownClient, topic, 0, 400, queues);
    const reconnects = [];
    const subscription = subscribe({
      client: ownClient,
      topic,
      group,
      from: "first",
      credit: 32,
      WebSocket,
      reconnect: { initialDelayMs: 50, maxDelayMs: 400 },
      onReconnect: (info) => reconnects.push(info),
    });
    try {
      const { taken, ackedBeforeCut } = await consumeWithCut(subscription, {
        queues,
        perQueue: 250,
        cutAfter: 150,
        timeoutMs: 60000,
        cut: async () => {
          await own.stop(); // SIGTERM: the broker closes the socket with 1001
          await sleep(300); // the subscriber meets a refused connection (1006) and backs off
          await own.launch();
          await produceSpread(ownClient, topic, 400, 100, queues);
        },
      });
      checkResumed(taken, ackedBeforeCut, queues, 250);
      assert.equal(reconnects[0].code, 1001, `first close: ${JSON.stringify(reconnects[0])}`);
      assert.ok(reconnects.length >= 2, "at least one refused attempt");
      assert.ok(subscription.reconnects >= 1);
    } finally {
      await subscription.close();
    }
  });
});

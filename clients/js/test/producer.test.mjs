// The produce WebSocket: results matched to sends, error results, binary batches, closes.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { WharfClient, WharfError, producer } from "../dist/index.js";
import { sharedBroker } from "./helpers/broker.mjs";
import { WebSocket, trackingWebSocket, unique } from "./helpers/util.mjs";

let broker;
let client;

before(async () => {
  broker = await sharedBroker();
  client = new WharfClient(broker.url);
});
after(async () => {
  await broker.release();
});

/** Every message of a queue, by offset. */
async function readQueue(topic, queueId) {
  const messages = [];
  let offset = 0;
  for (;;) {
    const page = await client.pull(topic, queueId, { offset, maxMessages: 500 });
    messages.push(...page.messages);
    if (page.status !== "FOUND") return messages;
    offset = page.next_offset;
  }
}

describe("producer", () => {
  test("answers matched to sends: 300 in flight at once", async () => {
    const topic = unique("produce-ws");
    await client.createTopic(topic, { queues: 3 });
    const p = producer({ client, topic, WebSocket });
    try {
      const sends = Array.from({ length: 300 }, (_, i) => p.send({ body: `p-${i}`, queue_id: i % 3, keys: [`key-${i}`] }));
      assert.ok(p.pending > 0);
      const results = await Promise.all(sends);
      assert.equal(p.pending, 0);
      const stored = await Promise.all([0, 1, 2].map((queue) => readQueue(topic, queue)));
      for (const [i, result] of results.entries()) {
        assert.equal(result.status, "SEND_OK");
        assert.equal(result.queue_id, i % 3);
        assert.equal(typeof result.id, "string");
        const message = stored[result.queue_id][result.queue_offset];
        assert.equal(message.body, `p-${i}`, `send ${i} answered with its own message`);
        assert.equal(message.msg_id, result.msg_id);
      }
      // In order per queue: the frames' order.
      for (const queue of [0, 1, 2]) {
        const offsets = results.filter((r) => r.queue_id === queue).map((r) => r.queue_offset);
        assert.deepEqual(offsets, [...offsets].sort((a, b) => a - b));
      }
    } finally {
      await p.close();
    }
  });

  test("an error result rejects its send only; the socket stays open", async () => {
    const topic = unique("produce-errors");
    await client.createTopic(topic, { queues: 1 });
    const p = producer({ client, topic, WebSocket });
    try {
      const outcomes = await Promise.allSettled([
        p.send({ body: "good-1" }),
        p.send({ body: "" }),
        p.send({ body: "bad queue", queue_id: 5 }),
        p.send({ body: "good-2", properties: { DELAY: "3" } }),
        p.send({ body: "good-3" }),
      ]);
      assert.deepEqual(outcomes.map((o) => o.status), ["fulfilled", "rejected", "rejected", "rejected", "fulfilled"]);
      assert.ok(outcomes[1].reason instanceof WharfError);
      assert.equal(outcomes[1].reason.errorCode, 40006);
      assert.equal(outcomes[1].reason.status, 400);
      assert.equal(outcomes[2].reason.errorCode, 40011);
      assert.equal(outcomes[3].reason.errorCode, 40008);
      const after = await p.send({ body: "after" });
      assert.equal(after.status, "SEND_OK");
      assert.deepEqual((await readQueue(topic, 0)).map((m) => m.body), ["good-1", "good-3", "after"]);
    } finally {
      await p.close();
    }
  });

  test("binary batches: one frame each, results matched by frame and index", async () => {
    const topic = unique("produce-binary");
    await client.createTopic(topic, { queues: 2 });
    const p = producer({ client, topic, format: "binary", WebSocket });
    try {
      const batches = Array.from({ length: 4 }, (_, b) =>
        Array.from({ length: 50 }, (_, i) => ({
          body: b === 3 && i === 0 ? new Uint8Array([0xff, 0xfe]) : `b${b}-${i}`,
          queue_id: i % 2,
          tags: `T${b}`,
          keys: [`k${b}-${i}`],
          properties: { batch: String(b) },
          unique_id: `u-${topic}-${b}-${i}`,
        })),
      );
      const single = p.send({ body: "a json frame between" });
      const answers = await Promise.all(batches.map((batch) => p.sendBatch(batch)));
      assert.equal((await single).status, "SEND_OK");
      const stored = await Promise.all([0, 1].map((queue) => readQueue(topic, queue)));
      for (const [b, results] of answers.entries()) {
        assert.equal(results.length, 50);
        for (const [i, result] of results.entries()) {
          assert.equal(result.index, i);
          assert.equal(typeof result.frame, "number");
          assert.equal(result.unique_id, `u-${topic}-${b}-${i}`);
          const message = stored[result.queue_id][result.queue_offset];
          if (b === 3 && i === 0) assert.equal(message.body, "//4=");
          else assert.equal(message.body, `b${b}-${i}`);
          assert.equal(message.tags, `T${b}`);
          assert.deepEqual(message.keys, [`k${b}-${i}`]);
          assert.deepEqual(message.properties, { batch: String(b) });
        }
      }
      // A batch with a bad message is refused whole.
      await assert.rejects(p.sendBatch([{ body: "ok" }, { body: "x", queue_id: 9 }]), { errorCode: 40011 });
      assert.equal((await p.send({ body: "still open" })).status, "SEND_OK");
    } finally {
      await p.close();
    }
  });

  test("close waits for the results; later sends are refused", async () => {
    const topic = unique("produce-close");
    await client.createTopic(topic, { queues: 1 });
    const p = producer({ client, topic, WebSocket });
    const sends = Array.from({ length: 50 }, (_, i) => p.send({ body: `c-${i}` }));
    await p.close();
    assert.equal((await Promise.all(sends)).length, 50);
    await assert.rejects(p.send({ body: "late" }), /closed/);
  });

  test("a topic that cannot be written closes the socket: 4409 rejects the sends", async () => {
    const topic = unique("read-only");
    await client.createTopic(topic, { queues: 1, perm: 4 });
    const p = producer({ client, topic, WebSocket });
    await assert.rejects(p.send({ body: "x" }), (error) => {
      assert.ok(error instanceof WharfError);
      assert.equal(error.closeCode, 4409);
      assert.equal(error.status, 409);
      assert.equal(error.errorCode, 40902);
      return true;
    });
    await assert.rejects(p.send({ body: "y" }), { closeCode: 4409 });
  });

  test("idempotent: a lost socket's unanswered messages are sent again and stored once", async () => {
    const topic = unique("produce-resend");
    await client.createTopic(topic, { queues: 1 });
    const { WebSocket: Tracked, sockets } = trackingWebSocket();
    const p = producer({ client, topic, WebSocket: Tracked, idempotent: true, reconnect: { initialDelayMs: 20 } });
    try {
      const first = await p.send({ body: "warm-up" });
      assert.equal(first.queue_offset, 0);
      const sends = Array.from({ length: 200 }, (_, i) => p.send({ body: `r-${i}` }));
      sockets.at(-1).terminate(); // some may be stored without an answer
      const results = await Promise.all(sends);
      assert.ok(sockets.length >= 2, "a new socket");
      const stored = await readQueue(topic, 0);
      assert.equal(stored.length, 201, "each message stored once");
      for (const [i, result] of results.entries()) assert.equal(stored[result.queue_offset].body, `r-${i}`);
    } finally {
      await p.close();
    }
  });

  test("without unique ids a lost socket rejects the unanswered sends", async () => {
    const topic = unique("produce-lost");
    await client.createTopic(topic, { queues: 1 });
    const { WebSocket: Tracked, sockets } = trackingWebSocket();
    const p = producer({ client, topic, WebSocket: Tracked, reconnect: { initialDelayMs: 20 } });
    try {
      await p.send({ body: "warm-up" });
      const sends = Array.from({ length: 20 }, (_, i) => p.send({ body: `l-${i}` }));
      sockets.at(-1).terminate();
      const outcomes = await Promise.allSettled(sends);
      assert.ok(outcomes.some((outcome) => outcome.status === "rejected"), "the cut lost some answers");
      for (const outcome of outcomes) {
        if (outcome.status === "rejected") {
          assert.equal(outcome.reason.closeCode, 1006);
          assert.match(outcome.reason.message, /may or may not be stored/);
        }
      }
      assert.equal((await p.send({ body: "next" })).status, "SEND_OK", "a new socket for the next send");
    } finally {
      await p.close();
    }
  });
});

// The subscribe WebSocket against a real broker: order, credit, acks, nacks, binary frames, close codes.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { WharfClient, WharfError, subscribe } from "../dist/index.js";
import { sharedBroker } from "./helpers/broker.mjs";
import { WebSocket, eventually, sleep, take, unique } from "./helpers/util.mjs";

let broker;
let client;

before(async () => {
  broker = await sharedBroker();
  client = new WharfClient(broker.url);
});
after(async () => {
  await broker.release();
});

/** A topic with `queues` queues holding `count` messages, spread over the queues in turn. */
async function filledTopic(count, queues = 2, prefix = "sub") {
  const topic = unique(prefix);
  await client.createTopic(topic, { queues });
  for (let start = 0; start < count; start += 250) {
    const batch = [];
    for (let i = start; i < Math.min(count, start + 250); i++) {
      batch.push({ body: `m-${i}`, queue_id: i % queues, tags: i % 2 ? "odd" : "even", keys: [`k-${i}`] });
    }
    await client.produce(topic, batch);
  }
  return topic;
}

function assertInOrder(messages, queues, perQueue) {
  const byQueue = new Map();
  for (const message of messages) {
    const offsets = byQueue.get(message.queue_id) ?? [];
    offsets.push(message.queue_offset);
    byQueue.set(message.queue_id, offsets);
    assert.equal(message.body, `m-${message.queue_offset * queues + message.queue_id}`);
  }
  for (let queue = 0; queue < queues; queue++) {
    assert.deepEqual(byQueue.get(queue), Array.from({ length: perQueue }, (_, i) => i), `queue ${queue} in order`);
  }
}

describe("subscribe", () => {
  for (const format of ["json", "binary"]) {
    test(`1,000 messages in order, acked and committed (${format})`, async () => {
      const topic = await filledTopic(1000);
      const group = unique("g");
      const subscription = subscribe({ client, topic, group, from: "first", credit: 100, format, WebSocket });
      try {
        const messages = await take(subscription, 1000);
        assertInOrder(messages, 2, 500);
        assert.ok(messages.every((m) => m.reconsume_times === 0 && m.topic === topic));
        await eventually(() => subscription.committed.get(0) === 500 && subscription.committed.get(1) === 500, {
          what: "the committed frames",
        });
        const offsets = await client.getOffsets(group, { topic });
        assert.deepEqual(offsets.offsets.map((o) => o.committed_offset), [500, 500]);
        assert.equal(subscription.reconnects, 0);
      } finally {
        await subscription.close();
      }
      await subscription.done;
    });
  }

  test("binary frames decode to the JSON frames' messages", async () => {
    const topic = unique("formats");
    await client.createTopic(topic, { queues: 1 });
    await client.produce(topic, [
      { body: "plain", tags: "TagA", keys: ["a", "b"], properties: { region: "eu", n: "1" }, unique_id: "uid-1" },
      { body: new Uint8Array([0xff, 0x00, 0x80]) },
      { body: "ünïcödé ✓ \u{1F600}" },
      { body: "\uFEFFwith a byte order mark" },
    ]);
    const read = async (format) => {
      const subscription = subscribe({ client, topic, from: "first", format, WebSocket });
      try {
        return (await take(subscription, 4)).map((message) => message.toJSON());
      } finally {
        await subscription.close();
      }
    };
    const json = await read("json");
    const binary = await read("binary");
    assert.deepEqual(binary, json);
    assert.equal(json[0].unique_id, "uid-1");
    assert.deepEqual(json[0].properties, { region: "eu", n: "1" });
    assert.equal(json[1].encoding, "base64");
    assert.equal(json[3].body, "\uFEFFwith a byte order mark");
  });

  test("message helpers: bytes, text, json", async () => {
    const topic = unique("helpers");
    await client.createTopic(topic, { queues: 1 });
    await client.produce(topic, [{ body: JSON.stringify({ n: 7 }) }, { body: new Uint8Array([0xff, 1, 2]) }]);
    for (const format of ["json", "binary"]) {
      const subscription = subscribe({ client, topic, from: "first", format, WebSocket });
      try {
        const [first, second] = await take(subscription, 2);
        assert.deepEqual(first.json(), { n: 7 });
        assert.equal(first.text(), '{"n":7}');
        assert.deepEqual([...second.bytes()], [0xff, 1, 2]);
        assert.equal(second.body, "/wEC");
        assert.equal(second.encoding, "base64");
      } finally {
        await subscription.close();
      }
    }
  });

  test("credit: no more than granted waits in the client", async () => {
    const topic = await filledTopic(40, 1, "credit");
    const subscription = subscribe({ client, topic, from: "first", credit: 5, WebSocket });
    try {
      await eventually(() => subscription.buffered === 5, { what: "5 buffered messages" });
      await sleep(200);
      assert.equal(subscription.buffered, 5, "nothing beyond the credit");
      assert.equal((await subscription.status()).credit, 0);
      const messages = await take(subscription, 40);
      assert.deepEqual(messages.map((m) => m.queue_offset), Array.from({ length: 40 }, (_, i) => i));
      assert.ok(subscription.buffered <= 5);
    } finally {
      await subscription.close();
    }
  });

  for (const format of ["json", "binary"]) {
    test(`nack: delivered again, ahead of newer messages, reconsume_times raised (${format})`, async () => {
      const topic = await filledTopic(3, 1, "nack");
      const group = unique("g");
      const subscription = subscribe({ client, topic, group, from: "first", credit: 1, format, WebSocket });
      try {
        const [first] = await take(subscription, 1, { ack: false });
        assert.equal(first.queue_offset, 0);
        first.nack();
        assert.equal(first.settled, true);
        // With a credit of 1, the next two are the redelivery and message 1 (whichever the broker
        // read first), never message 2: the redelivery goes ahead of newer messages.
        const next = await take(subscription, 2, { ack: false });
        assert.deepEqual(next.map((m) => [m.queue_offset, m.reconsume_times]).sort(), [
          [0, 1],
          [1, 0],
        ]);
        const again = next.find((m) => m.queue_offset === 0);
        again.nack();
        next.find((m) => m.queue_offset === 1).ack();
        const rest = await take(subscription, 2, { ack: false });
        assert.deepEqual(rest.map((m) => [m.queue_offset, m.reconsume_times]).sort(), [
          [0, 2],
          [2, 0],
        ]);
        for (const message of rest) message.ack();
        await eventually(() => subscription.committed.get(0) === 3, { what: "commit 3" });
        const status = await subscription.status();
        assert.equal(status.unacked, 0);
        assert.equal(status.queues[0].committed, 3);
      } finally {
        await subscription.close();
      }
    });
  }

  test("the commit waits for the oldest unacknowledged message", async () => {
    const topic = await filledTopic(5, 1, "gap");
    const group = unique("g");
    const subscription = subscribe({ client, topic, group, from: "first", WebSocket });
    try {
      const messages = await take(subscription, 5, { ack: false });
      subscription.ack([messages[1], messages[2], messages[4]]); // a batched acknowledgement
      subscription.flush();
      await sleep(150);
      assert.equal((await client.getOffsets(group, { topic })).offsets[0].committed_offset, 0);
      messages[0].ack();
      await eventually(() => subscription.committed.get(0) === 3, { what: "commit 3" });
      messages[3].ack();
      await eventually(() => subscription.committed.get(0) === 5, { what: "commit 5" });
    } finally {
      await subscription.close();
    }
  });

  test("callback API: acked when the handler resolves, nacked when it throws", async () => {
    const topic = await filledTopic(50, 1, "callback");
    const group = unique("g");
    const seen = [];
    let failed = false;
    const subscription = subscribe({
      client,
      topic,
      group,
      from: "first",
      WebSocket,
      onMessage: async (message) => {
        seen.push([message.queue_offset, message.reconsume_times]);
        if (message.queue_offset === 10 && !failed) {
          failed = true;
          throw new Error("not now");
        }
      },
    });
    try {
      await eventually(() => subscription.committed.get(0) === 50, { what: "all 50 committed" });
      assert.deepEqual(seen.filter(([offset]) => offset === 10), [
        [10, 0],
        [10, 1],
      ]);
      assert.equal(new Set(seen.map(([offset]) => offset)).size, 50);
    } finally {
      await subscription.close();
    }
  });

  test("autoAck: a message is acked when the next is asked for", async () => {
    const topic = await filledTopic(20, 1, "autoack");
    const group = unique("g");
    const subscription = subscribe({ client, topic, group, from: "first", autoAck: true, WebSocket });
    let count = 0;
    for await (const message of subscription) {
      count++;
      if (message.queue_offset === 19) break;
    }
    assert.equal(count, 20);
    await eventually(() => subscription.committed.get(0) === 19, { what: "commit 19" });
    await subscription.close();
    await subscription.done;
    // The last message was not acked: it comes again to the group.
    const again = subscribe({ client, topic, group, WebSocket });
    const [first] = await take(again, 1);
    assert.equal(first.queue_offset, 19);
    await again.close();
  });

  test("without a group: from last, a tag filter, ack is a no-op and nack refused", async () => {
    const topic = unique("alone");
    await client.createTopic(topic, { queues: 2 });
    await client.produce(topic, [{ body: "before", tags: "a" }]);
    const subscription = subscribe({ client, topic, tags: "a", WebSocket });
    try {
      const assignment = await subscription.ready;
      assert.deepEqual(assignment.map((queue) => queue.queue_id), [0, 1]);
      await client.produce(topic, [
        { body: "x1", tags: "a", queue_id: 0 },
        { body: "skip", tags: "b", queue_id: 0 },
        { body: "x2", tags: "a", queue_id: 1 },
      ]);
      const messages = await take(subscription, 2);
      assert.deepEqual(messages.map((m) => m.body).sort(), ["x1", "x2"]);
      assert.throws(() => messages[0].nack(), TypeError);
      await sleep(100);
      assert.equal(subscription.buffered, 0);
    } finally {
      await subscription.close();
    }
  });

  test("an AbortSignal closes the subscription", async () => {
    const topic = await filledTopic(1, 1, "abort");
    const controller = new AbortController();
    const subscription = subscribe({ client, topic, from: "first", signal: controller.signal, WebSocket });
    await subscription.ready;
    setTimeout(() => controller.abort(), 50);
    const messages = [];
    for await (const message of subscription) messages.push(message);
    assert.equal(messages.length, 1);
    await subscription.done;
  });
});

describe("close codes", () => {
  test("an unknown topic ends the subscription: 4404, no reconnect", async () => {
    const reconnects = [];
    const subscription = subscribe({
      client,
      topic: unique("missing"),
      WebSocket,
      onReconnect: (info) => reconnects.push(info),
    });
    await assert.rejects(subscription.done, (error) => {
      assert.ok(error instanceof WharfError);
      assert.equal(error.closeCode, 4404);
      assert.equal(error.status, 404);
      assert.equal(error.errorCode, 40402);
      assert.match(error.message, /not found/);
      return true;
    });
    await assert.rejects(subscription.ready, { closeCode: 4404 });
    await assert.rejects(subscription.next(), { closeCode: 4404 });
    assert.deepEqual(reconnects, []);
  });

  test("a bad filter and too much credit are 4400", async () => {
    const topic = unique("bad");
    await client.createTopic(topic, { queues: 1 });
    const filter = subscribe({ client, topic, filterType: "sql92", filter: "a = ", WebSocket });
    await assert.rejects(filter.done, { closeCode: 4400, status: 400, errorCode: 40015 });
    const credit = subscribe({ client, topic, credit: 1_000_000, WebSocket });
    await assert.rejects(credit.done, { closeCode: 4400, status: 400, errorCode: 40012 });
  });

  test("no broker: reconnects with back-off until maxAttempts, then the 1006 is raised", async () => {
    const delays = [];
    const subscription = subscribe({
      url: "http://127.0.0.1:9",
      topic: "t",
      WebSocket,
      reconnect: { initialDelayMs: 10, maxDelayMs: 40, maxAttempts: 4 },
      onReconnect: (info) => delays.push(info.delayMs),
    });
    await assert.rejects(subscription.done, { closeCode: 1006 });
    assert.equal(delays.length, 4);
    assert.ok(delays[3] >= 30 && delays[3] <= 50, `capped back-off: ${delays}`);
  });
});

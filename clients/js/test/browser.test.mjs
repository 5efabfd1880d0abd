// The built module (dist/) in headless Chromium, against the real broker: REST calls, the producer
// socket and the subscribe socket (JSON and binary frames), with the browser's own fetch and
// WebSocket. The page is served on the broker's origin by request interception (see helpers/chromium.mjs).
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, normalize } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { WharfClient } from "../dist/index.js";
import { sharedBroker } from "./helpers/broker.mjs";
import { chromiumPath, launchChromium, openPage } from "./helpers/chromium.mjs";
import { unique } from "./helpers/util.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const PREFIX_PATH = "/__wharf_client_test__/";

function serve(path) {
  const file = normalize(join(root, path));
  if (!path.startsWith("dist/") || !file.startsWith(join(root, "dist")) || !existsSync(file)) return null;
  const type = file.endsWith(".js") ? "text/javascript" : "application/json";
  return { body: readFileSync(file), type };
}

// CI must run it (as the broker's .ci/run does for its browser tests); elsewhere a missing browser skips.
const skip = chromiumPath() === null && !process.env.CI ? "chromium is not installed (apt-get install chromium)" : false;

describe("in headless Chromium", { skip }, () => {
  let broker;
  let browser;
  let page;
  let client;

  before(async () => {
    broker = await sharedBroker();
    client = new WharfClient(broker.url);
    browser = await launchChromium();
    const prefix = `${broker.url}${PREFIX_PATH}`;
    // A page of the broker's own origin (so fetch and the WebSocket Origin check are same-origin),
    // into which the built module is imported from the intercepted prefix.
    page = await openPage(browser.cdp, { url: `${broker.url}/healthz`, prefix, serve });
    const loaded = await page.evaluate(`(async () => {
      window.wharf = await import(${JSON.stringify(`${PREFIX_PATH}dist/index.js`)});
      return typeof window.wharf.subscribe === "function" && typeof WebSocket === "function";
    })()`);
    assert.equal(loaded, true, `the module did not load:\n${page.logs.join("\n")}`);
  });

  after(async () => {
    await browser?.close();
    await broker?.release();
  });

  test("REST calls and errors with the browser's fetch", async () => {
    const topic = unique("browser-rest");
    const out = await page.evaluate(`(async () => {
      const { WharfClient, WharfError } = window.wharf;
      const client = new WharfClient(location.origin);
      const created = await client.createTopic(${JSON.stringify(topic)}, { queues: 2 });
      const results = await client.produce(created.name, [
        { body: "from the browser", queue_id: 1, keys: ["b-1"] },
        { body: new Uint8Array([0xff, 0x00]), queue_id: 1 },
      ]);
      const page = await client.pull(created.name, 1, { offset: 0 });
      const found = await client.lookupByKey(created.name, "b-1");
      let error = null;
      try {
        await client.getTopic("missing-" + created.name);
      } catch (e) {
        error = { isWharfError: e instanceof WharfError, status: e.status, errorCode: e.errorCode, message: e.message };
      }
      return { results, bodies: page.messages.map((m) => [m.body, m.encoding]), found: found.messages.length, error };
    })()`);
    assert.deepEqual(out.results.map((r) => [r.queue_id, r.queue_offset]), [
      [1, 0],
      [1, 1],
    ]);
    assert.deepEqual(out.bodies, [
      ["from the browser", "utf8"],
      ["/wA=", "base64"],
    ]);
    assert.equal(out.found, 1);
    assert.deepEqual(out.error, {
      isWharfError: true,
      status: 404,
      errorCode: 40402,
      message: `topic 'missing-${topic}' not found`,
    });
  });

  test("produce over the WebSocket, subscribe with a group (JSON and binary frames)", async () => {
    const topic = unique("browser-ws");
    const group = unique("browser-g");
    const out = await page.evaluate(`(async () => {
      const { WharfClient, producer, subscribe } = window.wharf;
      const client = new WharfClient(location.origin);
      const topic = ${JSON.stringify(topic)};
      await client.createTopic(topic, { queues: 2 });
      const p = producer({ client, topic });
      const results = await Promise.all(
        Array.from({ length: 200 }, (_, i) => p.send({ body: "b-" + i, queue_id: i % 2, tags: "T" })),
      );
      const batch = await p.sendBatch([{ body: "batch-0", queue_id: 0 }, { body: "batch-1", queue_id: 1 }]);
      await p.close();
      const out = { results: results.map((r, i) => [i, r.queue_id, r.queue_offset, r.status]), batch: batch.length };
      for (const format of ["json", "binary"]) {
        const subscription = subscribe({ client, topic, group: ${JSON.stringify(group)} + format, from: "first", credit: 40, format });
        const got = [];
        for await (const message of subscription) {
          got.push([message.queue_id, message.queue_offset, message.body]);
          message.ack();
          if (got.length === 202) break;
        }
        const deadline = Date.now() + 10000;
        while ((subscription.committed.get(0) !== 101 || subscription.committed.get(1) !== 101) && Date.now() < deadline) {
          await new Promise((r) => setTimeout(r, 20));
        }
        out[format] = { got, committed: [...subscription.committed], reconnects: subscription.reconnects };
        await subscription.close();
      }
      return out;
    })()`);
    for (const [i, queue, offset, status] of out.results) {
      assert.equal(status, "SEND_OK");
      assert.equal(queue, i % 2);
      assert.equal(offset, Math.floor(i / 2), `send ${i} matched to its own answer`);
    }
    assert.equal(out.batch, 2);
    for (const format of ["json", "binary"]) {
      const { got, committed, reconnects } = out[format];
      assert.equal(got.length, 202);
      for (const queue of [0, 1]) {
        const mine = got.filter(([q]) => q === queue);
        assert.deepEqual(mine.map(([, offset]) => offset), Array.from({ length: 101 }, (_, i) => i), `${format} queue ${queue} in order`);
        for (const [, offset, body] of mine) assert.equal(body, offset === 100 ? `batch-${queue}` : `b-${offset * 2 + queue}`);
      }
      assert.deepEqual(committed, [
        [0, 101],
        [1, 101],
      ]);
      assert.equal(reconnects, 0);
    }
    // What the browser produced is what Node reads back.
    const page0 = await client.pull(topic, 0, { offset: 0, maxMessages: 3 });
    assert.deepEqual(page0.messages.map((m) => m.body), ["b-0", "b-2", "b-4"]);
    const offsets = await client.getOffsets(`${group}binary`, { topic });
    assert.deepEqual(offsets.offsets.map((o) => o.committed_offset), [101, 101]);
  });

  test("a live subscription receives what Node produces", async () => {
    const topic = unique("browser-live");
    await client.createTopic(topic, { queues: 1 });
    await page.evaluate(`(async () => {
      const { WharfClient, subscribe } = window.wharf;
      window.live = subscribe({ client: new WharfClient(location.origin), topic: ${JSON.stringify(topic)}, format: "binary" });
      await window.live.ready;
      return true;
    })()`);
    await client.produce(topic, [{ body: "live-1", tags: "x" }, { body: new Uint8Array([1, 0xff]) }]);
    const out = await page.evaluate(`(async () => {
      const got = await window.live.receive(2, 10000);
      const more = got.length < 2 ? await window.live.receive(2 - got.length, 10000) : [];
      await window.live.close();
      return [...got, ...more].map((m) => ({ body: m.body, encoding: m.encoding, tags: m.tags, bytes: [...m.bytes()] }));
    })()`);
    assert.deepEqual(out, [
      { body: "live-1", encoding: "utf8", tags: "x", bytes: [...Buffer.from("live-1")] },
      { body: "Af8=", encoding: "base64", tags: "", bytes: [1, 0xff] },
    ]);
  });
});

// Typed REST calls against a real broker: topics, produce, pull, lookup, offsets, errors.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { WharfClient, WharfError, createClient } from "../dist/index.js";
import { sharedBroker } from "./helpers/broker.mjs";
import { unique } from "./helpers/util.mjs";

let broker;
let client;

before(async () => {
  broker = await sharedBroker();
  client = createClient({ url: broker.url });
});
after(async () => {
  await broker.release();
});

describe("topics", () => {
  test("create, get, list (paged), delete", async () => {
    const name = unique("rest-topic");
    await client.createTopic(`${name}-other`);
    const created = await client.createTopic(name, { queues: 3 });
    assert.equal(created.name, name);
    assert.equal(created.read_queues, 3);
    assert.equal(created.write_queues, 3);
    const again = await client.createTopic(name, { queues: 3 }); // 200: there with this configuration
    assert.equal(again.name, name);
    assert.equal((await client.getTopic(name)).read_queues, 3);

    const names = [];
    for await (const topic of client.topics(2)) names.push(topic.name);
    assert.ok(names.includes(name), "the paged listing holds the topic");
    const page = await client.listTopics({ limit: 1 });
    assert.equal(page.topics.length, 1);
    assert.equal(typeof page.next_cursor, "string");

    const queues = await client.listQueues(name);
    assert.deepEqual(queues.queues.map((queue) => queue.queue_id), [0, 1, 2]);

    await client.deleteTopic(name);
    await assert.rejects(client.getTopic(name), (error) => {
      assert.ok(error instanceof WharfError);
      assert.equal(error.status, 404);
      assert.equal(error.errorCode, 40402);
      assert.match(error.message, /not found/);
      return true;
    });
  });

  test("bulk create: one result per topic", async () => {
    const a = unique("bulk-a");
    const b = unique("bulk-b");
    await client.createTopic(b, { queues: 2 });
    const answer = await client.createTopics([{ name: a, queues: 2 }, { name: b, queues: 2 }, { name: b, queues: 5 }]);
    assert.deepEqual(answer.results.map((result) => result.status), [201, 200, 409]);
    assert.equal(answer.created, 1);
    assert.equal(answer.existing, 1);
    assert.equal(answer.failed, 1);
    assert.equal(answer.results[2].error.error_code, 40901);
  });

  test("a conflicting create is a WharfError 409", async () => {
    const name = unique("conflict");
    await client.createTopic(name, { queues: 2 });
    await assert.rejects(client.createTopic(name, { queues: 4 }), { name: "WharfError", status: 409, errorCode: 40901 });
  });
});

describe("produce and pull", () => {
  test("a JSON batch, a single message and bytes, pulled back by offset", async () => {
    const topic = unique("produce");
    await client.createTopic(topic, { queues: 2 });
    const results = await client.produce(topic, [
      { body: "one", tags: "TagA", keys: ["k-1"], queue_id: 0, properties: { region: "eu" } },
      { body: "two", queue_id: 0 },
    ]);
    assert.equal(results.length, 2);
    assert.deepEqual(results.map((result) => [result.queue_id, result.queue_offset, result.status]), [
      [0, 0, "SEND_OK"],
      [0, 1, "SEND_OK"],
    ]);
    const single = await client.produceOne(topic, { body: "three", queue_id: 0, unique_id: "u-3" });
    assert.equal(single.queue_offset, 2);
    assert.equal(single.unique_id, "u-3");
    const bytes = new Uint8Array([0, 255, 1, 254]);
    const binary = await client.produceOne(topic, { body: bytes, queue_id: 0 });
    assert.equal(binary.queue_offset, 3);

    const page = await client.pull(topic, 0, { offset: 0, maxMessages: 10 });
    assert.equal(page.status, "FOUND");
    assert.equal(page.next_offset, 4);
    assert.deepEqual(page.messages.map((m) => m.body), ["one", "two", "three", "AP8B/g=="]);
    assert.deepEqual(page.messages.map((m) => m.encoding), ["utf8", "utf8", "utf8", "base64"]);
    assert.equal(page.messages[0].tags, "TagA");
    assert.deepEqual(page.messages[0].keys, ["k-1"]);
    assert.deepEqual(page.messages[0].properties, { region: "eu" });
    assert.equal(page.messages[0].msg_id, results[0].msg_id);

    const tagged = await client.pull(topic, 0, { offset: 0, tags: "TagA" });
    assert.deepEqual(tagged.messages.map((m) => m.body), ["one"]);
    const sql = await client.pull(topic, 0, { offset: 0, filterType: "sql92", filter: "region = 'eu'" });
    assert.deepEqual(sql.messages.map((m) => m.body), ["one"]);

    const empty = await client.pull(topic, 1, { offset: 0, maxWaitMs: 50 });
    assert.notEqual(empty.status, "FOUND");
    assert.deepEqual(empty.messages, []);

    const byId = await client.getMessage(results[1].msg_id);
    assert.equal(byId.body, "two");
  });

  test("lookup by key and by unique id", async () => {
    const topic = unique("lookup");
    await client.createTopic(topic, { queues: 1 });
    await client.produce(topic, [
      { body: "a", keys: ["order-1", "customer-9"] },
      { body: "b", keys: "order-2" },
      { body: "c", keys: ["order-1"], unique_id: "pay-42" },
    ]);
    const order = await client.lookupByKey(topic, "order-1");
    assert.equal(order.key, "order-1");
    assert.deepEqual(order.messages.map((m) => m.body).sort(), ["a", "c"]);
    assert.deepEqual((await client.lookupByKey(topic, "pay-42")).messages.map((m) => m.body), ["c"]);
    assert.deepEqual((await client.lookupByKey(topic, "order-1", { max: 1 })).messages.length, 1);
    assert.deepEqual((await client.lookupByKey(topic, "nobody")).messages, []);
  });

  test("produce errors carry the envelope", async () => {
    const topic = unique("bad-produce");
    await client.createTopic(topic, { queues: 1 });
    await assert.rejects(client.produce(topic, [{ body: "" }]), { status: 400, errorCode: 40006 });
    await assert.rejects(client.produce(topic, [{ body: "x", queue_id: 7 }]), { status: 400, errorCode: 40011 });
    await assert.rejects(client.produceOne(topic, { body: "x", delay_ms: -1 }), (error) => {
      assert.ok(error instanceof WharfError);
      assert.ok([400, 422].includes(error.status));
      assert.equal(Math.floor(error.errorCode / 100), error.status);
      assert.equal(error.body.error_code, error.errorCode);
      return true;
    });
  });
});

describe("group offsets", () => {
  test("commit, read back with the lag, out of range", async () => {
    const topic = unique("offsets");
    const group = unique("g");
    await client.createTopic(topic, { queues: 2 });
    await client.produce(topic, Array.from({ length: 5 }, (_, i) => ({ body: `m${i}`, queue_id: 0 })));
    const committed = await client.commitOffsets(group, [{ topic, queue_id: 0, offset: 3 }]);
    assert.equal(committed.group, group);
    const offsets = await client.getOffsets(group, { topic });
    const queue0 = offsets.offsets.find((entry) => entry.queue_id === 0);
    assert.equal(queue0.committed_offset, 3);
    assert.equal(queue0.max_offset, 5);
    assert.equal(queue0.lag, 2);

    await assert.rejects(client.commitOffsets(group, [{ topic, queue_id: 0, offset: 99 }]), (error) => {
      assert.equal(error.status, 400);
      assert.equal(error.errorCode, 40014);
      assert.equal(error.body.min_offset, 0);
      assert.equal(error.body.max_offset, 5);
      assert.equal(error.body.queue_id, 0);
      return true;
    });
    // All or nothing: the commit above changed nothing.
    const still = await client.getOffsets(group, { topic });
    assert.equal(still.offsets.find((entry) => entry.queue_id === 0).committed_offset, 3);

    // A group pull reads from the committed offset.
    const page = await client.pull(topic, 0, { group });
    assert.deepEqual(page.messages.map((m) => m.body), ["m3", "m4"]);
  });
});

describe("the typed request()", () => {
  test("any operation by path and method", async () => {
    const topic = unique("raw");
    await client.request("post", "/v1/topics", { body: { name: topic, queues: 1 } });
    const route = await client.request("get", "/v1/topics/{topic}/route", { path: { topic } });
    assert.equal(route.queue_datas[0].read_queue_nums, 1);
    const health = await client.request("get", "/healthz");
    assert.equal(typeof health, "object");
    const answer = await client.request("post", "/v1/topics/{topic}/messages", {
      path: { topic },
      body: { messages: [{ body: "via request" }] },
    });
    assert.equal(answer.results[0].status, "SEND_OK");
  });

  test("no answer is a WharfError with status 0", async () => {
    const nowhere = new WharfClient("http://127.0.0.1:9"); // the discard port: nothing listens
    await assert.rejects(nowhere.listTopics(), (error) => {
      assert.ok(error instanceof WharfError);
      assert.equal(error.status, 0);
      assert.equal(error.errorCode, 0);
      assert.match(error.message, /no answer/);
      return true;
    });
  });

  test("a non-JSON error answer keeps its status", async () => {
    const fake = new WharfClient({
      url: "http://broker.invalid",
      fetch: async () => new Response("<html>bad gateway</html>", { status: 502, headers: { "content-type": "text/html" } }),
    });
    await assert.rejects(fake.listTopics(), { status: 502, errorCode: 0, message: "HTTP 502" });
  });

  test("requestInit goes to every fetch; the client's method, headers and body win", async () => {
    // The broker's front door (GET /) redirects to the console: followed by default, not with "manual".
    const following = new WharfClient(broker.url);
    assert.equal(await following.request("get", "/"), undefined); // the console's HTML: no JSON
    const manual = new WharfClient({ url: broker.url, requestInit: { redirect: "manual" } });
    await assert.rejects(manual.request("get", "/"), { name: "WharfError", status: 307 });

    const topic = unique("request-init");
    const overriding = new WharfClient({
      url: broker.url,
      requestInit: { redirect: "manual", method: "DELETE", headers: { "content-type": "text/plain" }, body: "x" },
    });
    assert.equal((await overriding.createTopic(topic, { queues: 2 })).read_queues, 2);
    assert.equal((await client.getTopic(topic)).name, topic);
  });

  test("credentials go as Basic auth", async () => {
    let seen;
    const fake = new WharfClient({
      url: "http://broker.invalid/",
      credentials: { accessKey: "ak", secretKey: "sk" },
      fetch: async (url, init) => {
        seen = { url, init };
        return Response.json({ topics: [] });
      },
    });
    await fake.listTopics({ limit: 5 });
    assert.equal(seen.url, "http://broker.invalid/v1/topics?limit=5");
    assert.equal(seen.init.headers.authorization, `Basic ${btoa("ak:sk")}`);
    assert.match(fake.socketUrl("/v1/ws/subscribe", { topic: "t" }), /^ws:\/\/broker\.invalid\/v1\/ws\/subscribe\?topic=t&token=YWs6c2s$/);
  });
});

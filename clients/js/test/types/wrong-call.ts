// Calls that must NOT type-check: each line marked `// wrong` must be reported by
// `tsc --strict --noEmit` (scripts/typecheck-negative.mjs checks every one, and nothing else).
import { WharfClient, WharfError, producer, subscribe } from "../../src/index.js";

export async function wrongCalls(client: WharfClient): Promise<void> {
  await client.produce("orders", [{ body: 42 }]); // wrong
  await client.produce("orders", [{ body: "x", queue_id: "1" }]); // wrong
  await client.produce("orders", [{ body: "x", colour: "red" }]); // wrong
  await client.createTopic("orders", { queues: "4" }); // wrong
  await client.pull("orders", "0"); // wrong
  await client.pull("orders", 0, { max_messages: 3 }); // wrong
  await client.commitOffsets("billing", [{ topic: "orders", queue_id: 0 }]); // wrong
  const next: string = (await client.pull("orders", 0)).next_offset; // wrong
  (await client.lookupByKey("orders", "k")).messages[0]?.queue_offset.toUpperCase(); // wrong
  await client.request("get", "/v1/topicz"); // wrong
  await client.request("delete", "/v1/topics"); // wrong
  await client.request("get", "/v1/topics/{topic}"); // wrong
  await client.request("get", "/v1/topics/{topic}", { path: { name: "orders" } }); // wrong
  await client.request("post", "/v1/topics/{topic}/messages", { path: { topic: "t" }, body: { mesages: [] } }); // wrong
  subscribe({ url: "http://x", topic: "orders", format: "xml" }); // wrong
  subscribe({ url: "http://x", group: "billing" }); // wrong
  await producer({ url: "http://x", topic: "orders" }).send({ tags: "TagA" }); // wrong
  new WharfError({ status: 404 }); // wrong
  void next;
}

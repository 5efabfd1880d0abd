// Calls that must type-check (`tsc --strict --noEmit`): see scripts/typecheck-negative.mjs.
import { WebSocket } from "ws";
import {
  WharfClient,
  WharfError,
  producer,
  subscribe,
  type MessageOut,
  type ProduceResult,
  type PullResponse,
  type ReceivedMessage,
  type TopicOut,
} from "../../src/index.js";

export async function rightCalls(): Promise<void> {
  const client = new WharfClient({ url: "http://127.0.0.1:8080", credentials: { accessKey: "a", secretKey: "b" } });
  const topic: TopicOut = await client.createTopic("orders", { queues: 4 });
  const results: ProduceResult[] = await client.produce(topic.name, [
    { body: "hello", tags: "TagA", keys: ["order-1"], queue_id: 0, properties: { region: "eu" } },
    { body: new Uint8Array([1, 2]), sharding_key: "customer-1", delay_ms: 1000 },
    { body: "aGk=", encoding: "base64", unique_id: "u-1" },
  ]);
  const offset: number | null | undefined = results[0]?.queue_offset;
  const one: ProduceResult = await client.produceOne("orders", { body: "again", deliver_at_ms: Date.now() });
  const page: PullResponse = await client.pull("orders", 0, { offset: 0, maxMessages: 32, maxWaitMs: 1000, tags: "TagA" });
  const next: number = page.next_offset;
  const status: "FOUND" | "NO_MATCHED_MESSAGE" | "NO_MESSAGE_IN_QUEUE" | "OFFSET_TOO_SMALL" | "OFFSET_OVERFLOW_ONE" | "OFFSET_OVERFLOW_BADLY" = page.status;
  const bodies: string[] = page.messages.map((message: MessageOut) => message.body);
  await client.commitOffsets("billing", [{ topic: "orders", queue_id: 0, offset: next }]);
  const lag: number | undefined = (await client.getOffsets("billing", { topic: "orders" })).offsets[0]?.lag;
  const found: MessageOut[] = (await client.lookupByKey("orders", "order-1", { max: 10 })).messages;
  await client.deleteTopic("orders");
  for await (const listed of client.topics()) void listed.read_queues;

  // The generic, typed by openapi.yaml.
  const route = await client.request("get", "/v1/topics/{topic}/route", { path: { topic: "orders" } });
  const brokers: string[] = route.broker_datas.map((data) => data.broker_name);
  const listed = await client.request("get", "/v1/topics", { query: { limit: "10" } });
  const names: string[] = listed.topics.map((t) => t.name);
  await client.request("get", "/healthz");
  await client.request("put", "/v1/groups/{group}/offsets", {
    path: { group: "billing" },
    body: { offsets: [{ topic: "orders", queue_id: 1, offset: 3 }] },
  });

  const subscription = subscribe({ client, topic: "orders", group: "billing", from: "first", credit: 100, format: "binary", WebSocket });
  for await (const message of subscription) {
    const m: ReceivedMessage = message;
    const bytes: Uint8Array = m.bytes();
    const queueOffset: number = m.queue_offset;
    m.ack();
    void [bytes, queueOffset];
    break;
  }
  await subscription.close();

  const p = producer({ url: "http://127.0.0.1:8080", topic: "orders", WebSocket });
  const sent: ProduceResult = await p.send({ body: "x" });
  const batch: ProduceResult[] = await p.sendBatch([{ body: "y" }, { body: "z" }]);
  await p.close();

  try {
    await client.getTopic("missing");
  } catch (error) {
    if (error instanceof WharfError) {
      const code: number = error.errorCode;
      const httpStatus: number = error.status;
      const closeCode: number | undefined = error.closeCode;
      void [code, httpStatus, closeCode];
    }
  }
  void [offset, one, status, bodies, lag, found, brokers, names, sent, batch];
}

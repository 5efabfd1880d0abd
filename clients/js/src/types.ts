// Names for the broker's schemas (generated from openapi.yaml into openapi.d.ts by `npm run gen`).
import type { components } from "./openapi.js";

type Schemas = components["schemas"];

export type ErrorEnvelope = Schemas["ErrorEnvelope"];
export type MessageIn = Schemas["MessageIn"];
export type MessageOut = Schemas["MessageOut"];
export type MessageList = Schemas["MessageList"];
export type ProduceResult = Schemas["ProduceResult"];
export type ProduceResponse = Schemas["ProduceResponse"];
export type PullResponse = Schemas["PullResponse"];
export type PullStatus = PullResponse["status"];
export type TopicCreate = Schemas["TopicCreate"];
export type TopicSpec = Schemas["TopicSpec"];
export type TopicOut = Schemas["TopicOut"];
export type TopicList = Schemas["TopicList"];
export type TopicBulkResponse = Schemas["TopicBulkResponse"];
export type QueueList = Schemas["QueueList"];
export type QueueOffsets = Schemas["QueueOffsets"];
export type OffsetCommit = Schemas["OffsetCommit"];
export type OffsetCommitRequest = Schemas["OffsetCommitRequest"];
export type GroupOffsets = Schemas["GroupOffsets"];
export type GroupQueueOffset = Schemas["GroupQueueOffset"];

/** A message to produce: the broker's message object, whose body may also be given as bytes
 * (sent as base64). */
export type OutgoingMessage = Omit<MessageIn, "body" | "encoding"> &
  ({ body: string; encoding?: "utf8" | "base64" } | { body: Uint8Array; encoding?: never });

/** Where a subscriber (or a group without a committed offset) starts: the queue's end, its start,
 * or the first message stored at or after a time (ms since the epoch). */
export type StartFrom = "last" | "first" | number;

// @wharf/client: typed REST calls, the subscribe WebSocket (credit, acks, resume) and the produce
// WebSocket of the Wharf broker, for browsers and Node 18+.
export { WharfError, isEnvelope, type ErrorBody, type WharfErrorInit } from "./errors.js";
export {
  WharfClient,
  toMessageIn,
  type ClientOptions,
  type Credentials,
  type HttpMethod,
  type LookupOptions,
  type Operation,
  type OptionsArgument,
  type PathsWith,
  type PullOptions,
  type RequestOptions,
  type SuccessBody,
} from "./http.js";
export {
  ReceivedMessage,
  Subscription,
  subscribe,
  type QueueAssignment,
  type ReconnectInfo,
  type ReconnectOptions,
  type SubscribeOptions,
  type SubscriptionStatus,
} from "./subscribe.js";
export { Producer, producer, type ProducerOptions, type SendResult } from "./producer.js";
export { decodeRecord, decodeRecords, decodeProperties, encodeBatch, type DecodedRecord, type DeliveredMessage } from "./records.js";
export { RECONNECT_CODES, type WebSocketConstructor } from "./socket.js";
export { decodeBody, encodeBody } from "./encoding.js";
export type * from "./types.js";
export type { components, operations, paths } from "./openapi.js";

import { WharfClient, type ClientOptions } from "./http.js";

/** A REST client for the broker at `url`. */
export function createClient(options: ClientOptions | string): WharfClient {
  return new WharfClient(options);
}

// @wharf/client 0.1.0: clients/js/dist/index.js, copied by clients/js/scripts/vendor.mjs (npm run build). Do not edit.
// @wharf/client: typed REST calls, the subscribe WebSocket (credit, acks, resume) and the produce
// WebSocket of the Wharf broker, for browsers and Node 18+.
export { WharfError, isEnvelope } from "./errors.js";
export { WharfClient, toMessageIn, } from "./http.js";
export { ReceivedMessage, Subscription, subscribe, } from "./subscribe.js";
export { Producer, producer } from "./producer.js";
export { decodeRecord, decodeRecords, decodeProperties, encodeBatch } from "./records.js";
export { RECONNECT_CODES } from "./socket.js";
export { decodeBody, encodeBody } from "./encoding.js";
import { WharfClient } from "./http.js";
/** A REST client for the broker at `url`. */
export function createClient(options) {
    return new WharfClient(options);
}

// @wharf/client 0.1.0: clients/js/dist/socket.js, copied by clients/js/scripts/vendor.mjs (npm run build). Do not edit.
// What the subscriber and the producer share: finding a WebSocket implementation, and the close codes.
export const OPEN = 1;
/**
 * Closes after which a subscription is opened again and resumed, as the broker's README lists them
 * for its own subscriber: 1000 (closed by the broker while the client still wanted it), 1001 (the
 * broker is shutting down), 1006 (the connection dropped, or could not be made), 1011 (no pong: a
 * dead connection), 1012 (service restart), 1013 (try again later: the client read too slowly), 4500
 * (an unexpected fault), 4503 (the broker is starting, its store is closed, or its registry is out of
 * reach). Any other close ends the subscription with a WharfError.
 */
export const RECONNECT_CODES = Object.freeze([1000, 1001, 1006, 1011, 1012, 1013, 4500, 4503]);
export function resolveWebSocket(given) {
    const found = given ?? globalThis.WebSocket;
    if (typeof found !== "function") {
        throw new TypeError("no WebSocket implementation: pass options.WebSocket (for example `import { WebSocket } from \"ws\"` on Node < 22)");
    }
    return found;
}
export function openSocket(WebSocketImpl, url) {
    const socket = new WebSocketImpl(url);
    socket.binaryType = "arraybuffer";
    return socket;
}
/** A frame's payload as bytes, whatever the implementation handed over (ArrayBuffer, a view, a Node Buffer). */
export function frameBytes(data) {
    if (data instanceof ArrayBuffer)
        return new Uint8Array(data);
    if (ArrayBuffer.isView(data))
        return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    return null;
}
/** Back-off before attempt `attempt` (0 first): `initialMs` doubling up to `maxMs`, with jitter. */
export function backoffDelay(attempt, initialMs, maxMs) {
    const base = Math.min(maxMs, initialMs * 2 ** Math.min(attempt, 30));
    return Math.round(base * (0.75 + Math.random() * 0.5));
}

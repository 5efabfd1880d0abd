// @wharf/client 0.1.0: clients/js/dist/encoding.js, copied by clients/js/scripts/vendor.mjs (npm run build). Do not edit.
// Bytes <-> text helpers that work alike in browsers and Node 18+ (no Buffer).
const CHUNK = 0x8000;
const utf8Strict = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const utf8Loose = new TextDecoder("utf-8", { ignoreBOM: true });
const encoder = new TextEncoder();
export function utf8Encode(text) {
    return encoder.encode(text);
}
/** UTF-8 text of `bytes`, replacing bad sequences. */
export function utf8Decode(bytes) {
    return utf8Loose.decode(bytes);
}
export function toBase64(bytes) {
    let binary = "";
    for (let start = 0; start < bytes.length; start += CHUNK) {
        binary += String.fromCharCode(...bytes.subarray(start, start + CHUNK));
    }
    return btoa(binary);
}
export function fromBase64(text) {
    const binary = atob(text);
    const bytes = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i++)
        bytes[i] = binary.charCodeAt(i);
    return bytes;
}
/** As the broker encodes a body in JSON: UTF-8 text when the bytes are valid UTF-8, else base64. */
export function encodeBody(bytes) {
    try {
        return { body: utf8Strict.decode(bytes), encoding: "utf8" };
    }
    catch {
        return { body: toBase64(bytes), encoding: "base64" };
    }
}
/** The bytes of a JSON body. */
export function decodeBody(body, encoding) {
    return encoding === "base64" ? fromBase64(body) : utf8Encode(body);
}
export function hex(bytes) {
    let out = "";
    for (const byte of bytes)
        out += byte.toString(16).padStart(2, "0");
    return out.toUpperCase();
}
/** base64url without padding: the WebSocket `token` parameter. */
export function base64url(text) {
    return toBase64(utf8Encode(text)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

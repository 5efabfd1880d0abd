// What the subscriber and the producer share: finding a WebSocket implementation, and the close codes.

/** The constructor of a WebSocket: the browser's, Node 22's global one, or `ws`'s `WebSocket`. */
export type WebSocketConstructor = new (url: string) => unknown;

/** The part of the WebSocket interface this client uses (the browser's, undici's and `ws`'s agree). */
export interface SocketLike {
  readonly readyState: number;
  binaryType: string;
  readonly bufferedAmount: number;
  send(data: string | ArrayBufferView | ArrayBuffer): void;
  close(code?: number, reason?: string): void;
  addEventListener(type: "open", listener: () => void): void;
  addEventListener(type: "message", listener: (event: { data: unknown }) => void): void;
  addEventListener(type: "close", listener: (event: { code: number; reason: string; wasClean?: boolean }) => void): void;
  addEventListener(type: "error", listener: (event: unknown) => void): void;
}

export const OPEN = 1;

/**
 * Closes after which a subscription is opened again and resumed, as the broker's README lists them
 * for its own subscriber: 1000 (closed by the broker while the client still wanted it), 1001 (the
 * broker is shutting down), 1006 (the connection dropped, or could not be made), 1011 (no pong: a
 * dead connection), 1012 (service restart), 1013 (try again later: the client read too slowly), 4500
 * (an unexpected fault), 4503 (the broker is starting, its store is closed, or its registry is out of
 * reach). Any other close ends the subscription with a WharfError.
 */
export const RECONNECT_CODES: readonly number[] = Object.freeze([1000, 1001, 1006, 1011, 1012, 1013, 4500, 4503]);

export function resolveWebSocket(given: WebSocketConstructor | undefined): WebSocketConstructor {
  const found = given ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
  if (typeof found !== "function") {
    throw new TypeError(
      "no WebSocket implementation: pass options.WebSocket (for example `import { WebSocket } from \"ws\"` on Node < 22)",
    );
  }
  return found;
}

export function openSocket(WebSocketImpl: WebSocketConstructor, url: string): SocketLike {
  const socket = new WebSocketImpl(url) as SocketLike;
  socket.binaryType = "arraybuffer";
  return socket;
}

/** A frame's payload as bytes, whatever the implementation handed over (ArrayBuffer, a view, a Node Buffer). */
export function frameBytes(data: unknown): Uint8Array | null {
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  return null;
}

/** Back-off before attempt `attempt` (0 first): `initialMs` doubling up to `maxMs`, with jitter. */
export function backoffDelay(attempt: number, initialMs: number, maxMs: number): number {
  const base = Math.min(maxMs, initialMs * 2 ** Math.min(attempt, 30));
  return Math.round(base * (0.75 + Math.random() * 0.5));
}

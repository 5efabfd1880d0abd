// @wharf/client 0.1.0: clients/js/dist/producer.js, copied by clients/js/scripts/vendor.mjs (npm run build). Do not edit.
// The produce WebSocket (`/v1/ws/produce?topic=T`): messages go out as frames without waiting, and
// each send's promise settles with the result the broker matched to it (by `id`, or for a binary
// batch frame by the frame's number and the message's index). See the broker's README, "WebSocket".
import { WharfError } from "./errors.js";
import { WharfClient, toMessageIn } from "./http.js";
import { encodeBatch } from "./records.js";
import { OPEN, RECONNECT_CODES, backoffDelay, openSocket, resolveWebSocket, } from "./socket.js";
function randomId() {
    const crypto = globalThis.crypto;
    if (crypto?.randomUUID)
        return crypto.randomUUID();
    return `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}-${Math.random().toString(36).slice(2)}`;
}
/** One produce socket of one topic. */
export class Producer {
    topic;
    client;
    WebSocketImpl;
    binary;
    maxPending;
    idempotent;
    reconnectEnabled;
    reconnect;
    socket = null;
    socketOpen = false;
    connection = 0;
    attempts = 0;
    reconnectTimer;
    sequence = 0;
    binaryFrames = 0; // binary frames sent on the current socket
    outbox = []; // not sent yet
    inflight = new Map(); // sent, by id
    batches = new Map(); // sent binary frames, by number
    inflightMessages = 0;
    idleWaiters = [];
    closed = false;
    failure;
    constructor(options) {
        if (!options.topic)
            throw new TypeError("a producer needs a topic");
        this.topic = options.topic;
        if (options.client)
            this.client = options.client;
        else if (options.url) {
            const clientOptions = { url: options.url };
            if (options.credentials)
                clientOptions.credentials = options.credentials;
            this.client = new WharfClient(clientOptions);
        }
        else
            throw new TypeError("a producer needs a url or a client");
        this.WebSocketImpl = resolveWebSocket(options.WebSocket);
        this.binary = options.format === "binary";
        this.maxPending = Math.max(1, options.maxPending ?? 1000);
        this.idempotent = options.idempotent ?? false;
        this.reconnectEnabled = options.reconnect !== false;
        const reconnect = options.reconnect === false ? {} : (options.reconnect ?? {});
        this.reconnect = {
            initialDelayMs: reconnect.initialDelayMs ?? 100,
            maxDelayMs: reconnect.maxDelayMs ?? 2000,
            maxAttempts: reconnect.maxAttempts ?? 10,
            codes: reconnect.codes ?? RECONNECT_CODES,
        };
    }
    /** Messages sent or waiting to be sent, without a result yet. */
    get pending() {
        return this.inflightMessages + this.outbox.reduce((sum, item) => sum + (item.kind === "batch" ? item.count : 1), 0);
    }
    /** Send one message; resolves with its result, rejects with a WharfError for an error result. */
    send(message) {
        return new Promise((resolve, reject) => {
            if (this.closed) {
                reject(this.failure ?? new WharfError({ status: 0, errorCode: 0, message: "the producer is closed" }));
                return;
            }
            const prepared = this.idempotent && !message.unique_id ? { ...message, unique_id: randomId() } : message;
            this.outbox.push({ kind: "json", id: String(++this.sequence), message: prepared, resolve, reject });
            this.pump();
        });
    }
    /** Send several messages: with `format: "binary"` one binary batch frame (stored in one append;
     * one bad message refuses the batch), else one frame each. Resolves with the results in order. */
    sendBatch(messages) {
        if (!this.binary)
            return Promise.all(messages.map((message) => this.send(message)));
        return new Promise((resolve, reject) => {
            if (this.closed) {
                reject(this.failure ?? new WharfError({ status: 0, errorCode: 0, message: "the producer is closed" }));
                return;
            }
            const prepared = this.idempotent ? messages.map((m) => (m.unique_id ? m : { ...m, unique_id: randomId() })) : messages;
            let data;
            try {
                data = encodeBatch(prepared);
            }
            catch (error) {
                reject(error);
                return;
            }
            this.outbox.push({
                kind: "batch",
                data,
                count: messages.length,
                frame: -1,
                results: new Array(messages.length),
                answered: 0,
                unique: prepared.every((m) => Boolean(m.unique_id)),
                resolve,
                reject,
            });
            this.pump();
        });
    }
    /** Resolves once every message sent so far has its result. */
    flush() {
        if (!this.pending || this.failure)
            return Promise.resolve();
        return new Promise((resolve) => this.idleWaiters.push(resolve));
    }
    /** Wait for the results of what was sent, then close the socket. */
    async close() {
        if (this.closed)
            return;
        await this.flush();
        this.closed = true;
        if (this.reconnectTimer !== undefined)
            clearTimeout(this.reconnectTimer);
        const socket = this.socket;
        this.socket = null;
        this.connection++;
        if (socket !== null) {
            await new Promise((resolve) => {
                const timer = setTimeout(resolve, 2000);
                socket.addEventListener("close", () => {
                    clearTimeout(timer);
                    resolve();
                });
                try {
                    socket.close(1000, "");
                }
                catch {
                    clearTimeout(timer);
                    resolve();
                }
            });
        }
    }
    // -- the socket ----------------------------------------------------------------------------------
    open() {
        const connection = ++this.connection;
        this.binaryFrames = 0;
        this.socketOpen = false;
        const url = this.client.socketUrl("/v1/ws/produce", {
            topic: this.topic,
            format: this.binary ? "binary" : undefined,
        });
        let socket;
        try {
            socket = openSocket(this.WebSocketImpl, url);
        }
        catch (error) {
            this.fail(new WharfError({ status: 0, errorCode: 0, message: `cannot open ${url}: ${String(error)}`, cause: error }));
            return;
        }
        this.socket = socket;
        socket.addEventListener("open", () => {
            if (connection !== this.connection)
                return;
            this.socketOpen = true;
            this.pump();
        });
        socket.addEventListener("message", (event) => {
            if (connection !== this.connection)
                return;
            if (typeof event.data !== "string")
                return;
            const frame = JSON.parse(event.data);
            if (frame.type === "results" && Array.isArray(frame.results))
                this.onResults(frame.results);
        });
        socket.addEventListener("close", (event) => {
            if (connection !== this.connection)
                return;
            this.onClose(event.code, event.reason);
        });
        socket.addEventListener("error", () => undefined); // a close event follows
    }
    /** Send what the outbox holds, within maxPending; open the socket first if need be. */
    pump() {
        if (this.failure)
            return;
        if (this.socket === null) {
            if (this.reconnectTimer === undefined && this.outbox.length)
                this.open();
            return;
        }
        if (!this.socketOpen || this.socket.readyState !== OPEN)
            return;
        while (this.outbox.length && this.inflightMessages < this.maxPending) {
            const item = this.outbox.shift();
            if (item.kind === "json") {
                this.socket.send(JSON.stringify({ ...toMessageIn(item.message), id: item.id }));
                this.inflight.set(item.id, item);
                this.inflightMessages++;
            }
            else {
                item.frame = this.binaryFrames++;
                item.results = new Array(item.count);
                item.answered = 0;
                this.socket.send(item.data);
                this.batches.set(item.frame, item);
                this.inflightMessages += item.count;
            }
        }
    }
    onResults(results) {
        this.attempts = 0;
        for (const result of results) {
            const error = typeof result["error_code"] === "number" ? this.resultError(result) : undefined;
            if (typeof result["id"] === "string") {
                const send = this.inflight.get(result["id"]);
                if (!send)
                    continue;
                this.inflight.delete(send.id);
                this.inflightMessages--;
                if (error)
                    send.reject(error);
                else
                    send.resolve(result);
            }
            else if (typeof result["frame"] === "number") {
                const batch = this.batches.get(result["frame"]);
                if (!batch)
                    continue;
                const index = result["index"];
                if (error && typeof index !== "number") {
                    // The frame is not a batch the broker can read: one error for all of it.
                    this.batches.delete(batch.frame);
                    this.inflightMessages -= batch.count;
                    batch.reject(error);
                    continue;
                }
                if (typeof index !== "number" || batch.results[index] !== undefined)
                    continue;
                if (error) {
                    this.batches.delete(batch.frame);
                    this.inflightMessages -= batch.count - batch.answered;
                    batch.reject(error);
                    continue;
                }
                batch.results[index] = result;
                batch.answered++;
                this.inflightMessages--;
                if (batch.answered === batch.count) {
                    this.batches.delete(batch.frame);
                    batch.resolve(batch.results);
                }
            }
        }
        this.pump();
        this.wakeIdle();
    }
    resultError(result) {
        const code = result["error_code"];
        return new WharfError({
            status: Math.floor(code / 100),
            errorCode: code,
            message: String(result["message"] ?? ""),
            body: { ...result, error_code: code, message: String(result["message"] ?? "") },
        });
    }
    onClose(code, reason) {
        this.socket = null;
        this.socketOpen = false;
        if (this.closed)
            return;
        const passing = this.reconnectEnabled && this.reconnect.codes.includes(code) && this.attempts < this.reconnect.maxAttempts;
        const lost = WharfError.fromClose(code, reason);
        // What was sent and not answered may or may not be stored: send it again only where a
        // unique_id makes a repeat harmless.
        const again = [];
        for (const send of this.inflight.values()) {
            if (passing && send.message.unique_id)
                again.push(send);
            else
                send.reject(this.unanswered(lost));
        }
        for (const batch of this.batches.values()) {
            if (passing && batch.unique)
                again.push(batch);
            else
                batch.reject(this.unanswered(lost));
        }
        this.inflight.clear();
        this.batches.clear();
        this.inflightMessages = 0;
        this.outbox.unshift(...again);
        if (!passing) {
            this.fail(lost);
            return;
        }
        const attempt = ++this.attempts;
        const delay = backoffDelay(attempt - 1, this.reconnect.initialDelayMs, this.reconnect.maxDelayMs);
        this.reconnectTimer = setTimeout(() => {
            this.reconnectTimer = undefined;
            if (!this.closed)
                this.pump();
        }, delay);
        this.wakeIdle();
    }
    unanswered(lost) {
        return new WharfError({
            status: lost.status,
            errorCode: lost.errorCode,
            closeCode: lost.closeCode,
            message: `no result: the socket closed (${lost.closeCode} ${lost.message}); the message may or may not be stored (send it again with the same unique_id)`,
        });
    }
    fail(error) {
        this.failure = error;
        this.closed = true;
        for (const item of this.outbox.splice(0))
            item.reject(error);
        for (const send of this.inflight.values())
            send.reject(error);
        for (const batch of this.batches.values())
            batch.reject(error);
        this.inflight.clear();
        this.batches.clear();
        this.inflightMessages = 0;
        this.wakeIdle();
    }
    wakeIdle() {
        if (this.pending && !this.failure)
            return;
        for (const wake of this.idleWaiters.splice(0))
            wake();
    }
}
/** A producer over the produce WebSocket; see {@link ProducerOptions}. */
export function producer(options) {
    return new Producer(options);
}

// @wharf/client 0.1.0: clients/js/dist/subscribe.js, copied by clients/js/scripts/vendor.mjs (npm run build). Do not edit.
// The subscribe WebSocket (`/v1/ws/subscribe`): the broker pushes a topic's messages within the
// credit the client grants; with a group the client acknowledges them and the broker commits the
// group's offset (the oldest unacknowledged message). See the broker's README, "WebSocket".
import { decodeBody, utf8Decode } from "./encoding.js";
import { WharfError } from "./errors.js";
import { WharfClient } from "./http.js";
import { decodeRecords } from "./records.js";
import { OPEN, RECONNECT_CODES, backoffDelay, frameBytes, openSocket, resolveWebSocket, } from "./socket.js";
/** A delivered message: the broker's message object, with `ack()` and `nack()`. */
export class ReceivedMessage {
    #subscription;
    #connection;
    #bytes;
    #settled = false;
    /** @internal */
    constructor(subscription, connection, message, bytes) {
        Object.assign(this, message);
        this.#subscription = subscription;
        this.#connection = connection;
        this.#bytes = bytes;
    }
    /** The body's bytes. */
    bytes() {
        this.#bytes ??= decodeBody(this.body, this.encoding);
        return this.#bytes;
    }
    /** The body as text (UTF-8). */
    text() {
        return this.encoding === "utf8" ? this.body : utf8Decode(this.bytes());
    }
    /** The body parsed as JSON. */
    json() {
        return JSON.parse(this.text());
    }
    /** Whether it was acked or nacked already. */
    get settled() {
        return this.#settled;
    }
    /** The socket connection it came on (1 for the first; it grows with every reconnect). */
    get connection() {
        return this.#connection;
    }
    /** Processed: with a group, the broker may commit past it (acks are sent in batches). Without a
     * group there is nothing to acknowledge. Repeats are ignored. */
    ack() {
        if (this.#settled)
            return;
        this.#settled = true;
        this.#subscription.acknowledge(this);
    }
    /** Not processed: the broker delivers it again, ahead of newer messages of its queue, with
     * `reconsume_times` one higher (past the group's max reconsume times it goes to the dead-letter
     * topic). Needs a group. */
    nack() {
        if (this.#subscription.group === undefined)
            throw new TypeError("nack needs a group: subscribe with a group");
        if (this.#settled)
            return;
        this.#settled = true;
        this.#subscription.negativeAcknowledge(this);
    }
    toJSON() {
        const { ...fields } = this;
        return fields;
    }
}
function deferred() {
    let resolve;
    let reject;
    const promise = new Promise((ok, fail) => {
        resolve = ok;
        reject = fail;
    });
    promise.catch(() => undefined); // a rejection nobody awaits is no unhandled rejection
    return { promise, resolve, reject };
}
/** Call a user callback: what it throws is rethrown on its own, not into the subscription's state. */
function callBack(callback, value) {
    if (!callback)
        return;
    try {
        callback(value);
    }
    catch (error) {
        queueMicrotask(() => {
            throw error;
        });
    }
}
const ACK_CHUNK = 4096; // offsets per ack frame: well under the broker's 1 MiB frame limit
const PULL_PAGE = 256;
/**
 * One subscription: an async iterable of {@link ReceivedMessage} (or a callback, `onMessage`) over
 * one subscribe socket, opened again after a passing close and resumed where it was.
 */
export class Subscription {
    topic;
    group;
    /** Resolves once the subscription is closed by {@link close}; rejects with the error that ended it. */
    done;
    /** Resolves with the first `assignment` (the socket is subscribed); rejects if it ends first. */
    ready;
    options;
    client;
    WebSocketImpl;
    credit;
    binary;
    reconnectOptions;
    reconnectEnabled;
    keepaliveMs;
    flushDelayMs;
    doneDeferred = deferred();
    readyDeferred = deferred();
    socket = null;
    connectionNumber = 0; // grows with every socket; frames of an older socket are ignored
    attempts = 0; // reconnects in a row without an assignment
    reconnectTimer;
    keepaliveTimer;
    flushTimer;
    lastSentAt = 0;
    // Messages received and not yet taken, FIFO (an array with a moving head).
    buffer = [];
    head = 0;
    waiters = [];
    roomWaiters = [];
    statusWaiters = [];
    lastTaken;
    pendingPermits = 0; // taken (or dropped) since the last permit frame
    pendingAcks = new Map();
    catchingUp = false; // without a group: the gap since the last socket is being pulled
    assigned = new Map(); // queue -> offset of the current socket's assignment
    everAssigned = false;
    committedOffsets = new Map();
    // With a group: offsets acknowledged above the last commit known. After a reconnect the broker
    // sends them again when their ack did not reach it: they are acknowledged again, not handed out.
    ackedAbove = new Map();
    // Without a group: per queue, the offset after the last message received.
    nextOffsets = new Map();
    closing = false;
    failure;
    finished = false;
    reconnectCount = 0;
    constructor(options) {
        if (!options.topic)
            throw new TypeError("subscribe needs a topic");
        this.options = options;
        this.topic = options.topic;
        this.group = options.group || undefined;
        if (options.client)
            this.client = options.client;
        else if (options.url) {
            const clientOptions = { url: options.url };
            if (options.credentials)
                clientOptions.credentials = options.credentials;
            if (options.headers)
                clientOptions.headers = options.headers;
            if (options.fetch)
                clientOptions.fetch = options.fetch;
            if (options.requestInit)
                clientOptions.requestInit = options.requestInit;
            this.client = new WharfClient(clientOptions);
        }
        else
            throw new TypeError("subscribe needs a url or a client");
        this.WebSocketImpl = resolveWebSocket(options.WebSocket);
        this.credit = options.credit ?? 256;
        if (!Number.isInteger(this.credit) || this.credit < 1)
            throw new RangeError("credit must be a whole number >= 1");
        this.binary = options.format === "binary";
        const reconnect = options.reconnect === false ? {} : (options.reconnect ?? {});
        this.reconnectEnabled = options.reconnect !== false;
        this.reconnectOptions = {
            initialDelayMs: reconnect.initialDelayMs ?? 100,
            maxDelayMs: reconnect.maxDelayMs ?? 2000,
            maxAttempts: reconnect.maxAttempts ?? Infinity,
            codes: reconnect.codes ?? RECONNECT_CODES,
        };
        this.keepaliveMs = options.keepaliveMs ?? 20000;
        this.flushDelayMs = options.flushDelayMs ?? 10;
        this.done = this.doneDeferred.promise;
        this.ready = this.readyDeferred.promise;
        if (options.signal) {
            if (options.signal.aborted) {
                this.closing = true;
                this.finish();
                return;
            }
            options.signal.addEventListener("abort", () => void this.close(), { once: true });
        }
        this.connect();
        if (options.onMessage)
            void this.runHandler(options.onMessage);
    }
    /** The queues this socket reads now, and where it started each. */
    get assignment() {
        return [...this.assigned].map(([queue_id, offset]) => ({ queue_id, offset }));
    }
    /** With a group: the committed offset of each queue, as the broker last said. */
    get committed() {
        return this.committedOffsets;
    }
    /** How many times the socket was opened again. */
    get reconnects() {
        return this.reconnectCount;
    }
    /** Messages received and not yet taken. */
    get buffered() {
        return this.buffer.length - this.head;
    }
    /** Whether a socket is open now. */
    get connected() {
        return this.socket !== null && this.socket.readyState === OPEN;
    }
    // -- the socket ----------------------------------------------------------------------------------
    connect() {
        const connection = ++this.connectionNumber;
        // Without a group a socket starts only at last, first or a time: once something was assigned,
        // a new socket starts at last with no credit, and the gap is pulled first (see catchUp).
        const resumeAlone = this.group === undefined && this.everAssigned;
        if (this.group !== undefined)
            this.dropBuffered(() => true); // unacknowledged: they come again
        const credit = resumeAlone ? 0 : Math.max(0, this.credit - this.buffered);
        this.pendingPermits = 0;
        this.assigned = new Map();
        const options = this.options;
        const url = this.client.socketUrl("/v1/ws/subscribe", {
            topic: this.topic,
            group: this.group,
            tags: options.tags,
            filter_type: options.filterType,
            filter: options.filter,
            from: resumeAlone ? "last" : options.from === undefined ? undefined : String(options.from),
            queues: options.queues?.join(","),
            credit,
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
        this.catchingUp = resumeAlone;
        socket.addEventListener("message", (event) => {
            if (connection === this.connectionNumber)
                this.onFrame(event.data, connection);
        });
        socket.addEventListener("close", (event) => {
            if (connection === this.connectionNumber)
                this.onClose(event.code, event.reason);
        });
        socket.addEventListener("error", () => undefined); // a close event follows
        socket.addEventListener("open", () => {
            if (connection === this.connectionNumber)
                this.startKeepalive();
        });
    }
    onClose(code, reason) {
        this.socket = null;
        this.stopKeepalive();
        this.rejectStatusWaiters(code, reason);
        if (this.closing) {
            this.finish();
            return;
        }
        const options = this.reconnectOptions;
        if (this.reconnectEnabled && options.codes.includes(code) && this.attempts < options.maxAttempts) {
            // With a group, what the dead socket left unacknowledged comes again on the next one: what
            // waits here is not handed out meanwhile.
            if (this.group !== undefined)
                this.dropBuffered(() => true);
            this.scheduleReconnect(code, reason);
            return;
        }
        this.fail(WharfError.fromClose(code, reason));
    }
    scheduleReconnect(code, reason) {
        const attempt = ++this.attempts;
        const delayMs = backoffDelay(attempt - 1, this.reconnectOptions.initialDelayMs, this.reconnectOptions.maxDelayMs);
        callBack(this.options.onReconnect, { attempt, delayMs, code, reason });
        this.reconnectTimer = setTimeout(() => {
            this.reconnectTimer = undefined;
            if (this.closing || this.failure)
                return;
            this.reconnectCount++;
            this.connect();
        }, delayMs);
    }
    /** Drop the socket now (its frames are ignored from here on) and open another after a pause. */
    restart(code, reason) {
        const socket = this.socket;
        this.connectionNumber++;
        this.socket = null;
        this.stopKeepalive();
        this.rejectStatusWaiters(code, reason);
        try {
            socket?.close(1000, "reconnecting");
        }
        catch {
            // already closing
        }
        if (this.closing) {
            this.finish();
            return;
        }
        if (this.group !== undefined)
            this.dropBuffered(() => true);
        if (this.reconnectEnabled && this.attempts < this.reconnectOptions.maxAttempts)
            this.scheduleReconnect(code, reason);
        else
            this.fail(new WharfError({ status: 0, errorCode: 0, message: reason, closeCode: code }));
    }
    rejectStatusWaiters(code, reason) {
        if (!this.statusWaiters.length)
            return;
        const error = new WharfError({ status: 0, errorCode: 0, message: `the socket closed (${code} ${reason}) before the status came`, closeCode: code });
        for (const waiter of this.statusWaiters.splice(0))
            waiter.reject(error);
    }
    send(frame) {
        const socket = this.socket;
        if (socket === null || socket.readyState !== OPEN)
            return;
        socket.send(JSON.stringify(frame));
        this.lastSentAt = Date.now();
    }
    startKeepalive() {
        this.stopKeepalive();
        this.lastSentAt = Date.now();
        if (!this.keepaliveMs)
            return;
        this.keepaliveTimer = setInterval(() => {
            if (Date.now() - this.lastSentAt >= this.keepaliveMs)
                this.send({ type: "status" });
        }, Math.max(50, Math.floor(this.keepaliveMs / 4)));
    }
    stopKeepalive() {
        if (this.keepaliveTimer !== undefined)
            clearInterval(this.keepaliveTimer);
        this.keepaliveTimer = undefined;
    }
    // -- broker frames -------------------------------------------------------------------------------
    onFrame(data, connection) {
        try {
            if (typeof data === "string") {
                this.onTextFrame(JSON.parse(data), connection);
                return;
            }
            const bytes = frameBytes(data);
            if (bytes === null)
                throw new TypeError(`a frame of an unexpected kind: ${Object.prototype.toString.call(data)}`);
            const records = decodeRecords(bytes);
            this.deliver(records.map((record) => new ReceivedMessage(this, connection, record.message, record.bytes)));
        }
        catch (error) {
            const wrapped = error instanceof WharfError
                ? error
                : new WharfError({ status: 0, errorCode: 0, message: `a frame from the broker does not decode: ${String(error)}`, cause: error });
            this.closing = true;
            this.fail(wrapped);
        }
    }
    onTextFrame(frame, connection) {
        switch (frame.type) {
            case "messages": {
                const messages = frame["messages"].map((message) => new ReceivedMessage(this, connection, message));
                this.deliver(messages);
                return;
            }
            case "assignment":
                this.onAssignment(frame["queues"]);
                return;
            case "committed":
                this.onCommitted(frame["queue_id"], frame["offset"]);
                return;
            case "status": {
                const waiter = this.statusWaiters.shift();
                if (waiter) {
                    const { type: _type, ...status } = frame;
                    waiter.resolve(status);
                }
                return;
            }
            default:
                return; // a frame type of a newer broker: nothing this client needs
        }
    }
    onAssignment(queues) {
        this.attempts = 0; // the socket works: the next reconnect starts with the shortest pause
        const previous = this.assigned;
        this.assigned = new Map(queues.map((queue) => [queue.queue_id, queue.offset]));
        if (this.group !== undefined) {
            for (const queue of queues)
                this.onCommitted(queue.queue_id, queue.offset, true);
            for (const queueId of previous.keys()) {
                if (!this.assigned.has(queueId))
                    this.ackedAbove.delete(queueId); // handed to another member
            }
            // Messages of a queue taken away are another member's now: not handed out.
            this.dropBuffered((message) => !this.assigned.has(message.queue_id));
        }
        const first = !this.everAssigned;
        this.everAssigned = true;
        if (this.group === undefined) {
            if (this.catchingUp)
                void this.catchUp(queues, this.connectionNumber);
            else
                for (const queue of queues)
                    if (!this.nextOffsets.has(queue.queue_id))
                        this.nextOffsets.set(queue.queue_id, queue.offset);
        }
        if (first)
            this.readyDeferred.resolve(queues);
        callBack(this.options.onAssignment, queues);
        this.flush();
    }
    onCommitted(queueId, offset, assigned = false) {
        const known = this.committedOffsets.get(queueId);
        if (assigned || known === undefined || offset > known)
            this.committedOffsets.set(queueId, offset);
        const acked = this.ackedAbove.get(queueId);
        if (acked) {
            for (const value of acked)
                if (value < offset)
                    acked.delete(value);
            if (!acked.size)
                this.ackedAbove.delete(queueId);
        }
    }
    deliver(messages) {
        for (const message of messages) {
            const queueId = message.queue_id;
            const offset = message.queue_offset;
            if (this.group !== undefined) {
                if (this.assigned.size && !this.assigned.has(queueId)) {
                    this.pendingPermits++;
                    continue;
                }
                if (this.ackedAbove.get(queueId)?.has(offset)) {
                    // Acknowledged on an earlier socket whose ack the broker did not take: ack it again.
                    this.queueAck(queueId, offset);
                    this.pendingPermits++;
                    continue;
                }
            }
            else {
                const next = this.nextOffsets.get(queueId);
                if (next !== undefined && offset < next) {
                    this.pendingPermits++; // seen already
                    continue;
                }
                this.nextOffsets.set(queueId, offset + 1);
            }
            this.push(message);
        }
        if (this.pendingPermits || this.pendingAcks.size)
            this.scheduleFlush();
    }
    push(message) {
        const waiter = this.waiters.shift();
        if (waiter) {
            this.handOut(message);
            waiter.resolve({ value: message, done: false });
        }
        else
            this.buffer.push(message);
    }
    /** Remove buffered messages that `drop` picks; their credit is given back. */
    dropBuffered(drop) {
        const kept = [];
        for (let i = this.head; i < this.buffer.length; i++) {
            const message = this.buffer[i];
            if (drop(message))
                this.pendingPermits++;
            else
                kept.push(message);
        }
        this.buffer = kept;
        this.head = 0;
        this.wakeRoom();
    }
    // -- without a group: pulling what was stored while no socket was open ----------------------------
    async catchUp(queues, connection) {
        const options = this.options;
        try {
            for (const { queue_id: queueId, offset: upper } of queues) {
                let next = this.nextOffsets.get(queueId) ?? upper;
                while (next < upper) {
                    await this.room();
                    if (connection !== this.connectionNumber || this.closing)
                        return;
                    const want = Math.max(1, Math.min(PULL_PAGE, this.credit - this.buffered, upper - next));
                    const pullOptions = { offset: next, maxMessages: want };
                    if (options.tags !== undefined)
                        pullOptions.tags = options.tags;
                    if (options.filterType !== undefined)
                        pullOptions.filterType = options.filterType;
                    if (options.filter !== undefined)
                        pullOptions.filter = options.filter;
                    const page = await this.client.pull(this.topic, queueId, pullOptions);
                    if (connection !== this.connectionNumber || this.closing)
                        return;
                    if (page.status === "FOUND") {
                        for (const message of page.messages) {
                            if (message.queue_offset >= upper || message.queue_offset < next)
                                continue;
                            this.nextOffsets.set(queueId, message.queue_offset + 1);
                            this.push(new ReceivedMessage(this, connection, message));
                        }
                    }
                    else if (page.status !== "NO_MATCHED_MESSAGE" && page.status !== "OFFSET_TOO_SMALL") {
                        break; // the queue ends before `upper` on this broker now
                    }
                    const moved = Math.max(page.next_offset, page.status === "OFFSET_TOO_SMALL" ? page.min_offset : 0);
                    if (moved <= next)
                        break;
                    next = moved;
                }
                if ((this.nextOffsets.get(queueId) ?? -1) < upper)
                    this.nextOffsets.set(queueId, upper);
            }
            if (connection !== this.connectionNumber || this.closing)
                return;
            this.catchingUp = false;
            // The socket had no credit so far: grant what the buffer leaves room for.
            this.pendingPermits = Math.max(0, this.credit - this.buffered);
            this.flush();
        }
        catch (error) {
            if (connection !== this.connectionNumber || this.closing)
                return;
            const failure = error instanceof WharfError ? error : new WharfError({ status: 0, errorCode: 0, message: String(error), cause: error });
            if (failure.status === 0 || failure.status >= 500)
                this.restart(1006, `catching up failed: ${failure.message}`);
            else {
                this.closing = true;
                this.fail(failure);
            }
        }
    }
    /** Wait until the buffer has room for more (below the credit). */
    room() {
        if (this.buffered < this.credit || this.closing)
            return Promise.resolve();
        return new Promise((resolve) => this.roomWaiters.push(resolve));
    }
    wakeRoom() {
        if (this.buffered >= this.credit && !this.closing)
            return;
        const waiters = this.roomWaiters;
        this.roomWaiters = [];
        for (const wake of waiters)
            wake();
    }
    // -- acks and permits ----------------------------------------------------------------------------
    /** @internal */
    acknowledge(message) {
        if (this.group === undefined)
            return;
        const queueId = message.queue_id;
        const offset = message.queue_offset;
        const committed = this.committedOffsets.get(queueId);
        if (committed !== undefined && offset < committed)
            return; // committed past it already
        let acked = this.ackedAbove.get(queueId);
        if (!acked)
            this.ackedAbove.set(queueId, (acked = new Set()));
        acked.add(offset);
        this.queueAck(queueId, offset);
        this.scheduleFlush();
    }
    /** @internal */
    negativeAcknowledge(message) {
        this.flush(); // acks sent before stay before
        this.send({ type: "nack", queue_id: message.queue_id, offset: message.queue_offset });
    }
    /** Acknowledge several messages at once (one ack frame per queue). */
    ack(messages) {
        for (const message of messages)
            message.ack();
    }
    queueAck(queueId, offset) {
        let offsets = this.pendingAcks.get(queueId);
        if (!offsets)
            this.pendingAcks.set(queueId, (offsets = []));
        offsets.push(offset);
    }
    scheduleFlush() {
        if (this.pendingPermits >= Math.max(1, Math.floor(this.credit / 2))) {
            this.flush();
            return;
        }
        if (this.flushTimer === undefined) {
            this.flushTimer = setTimeout(() => {
                this.flushTimer = undefined;
                this.flush();
            }, this.flushDelayMs);
        }
    }
    /** Send the acks and permits waiting to go (they are sent by themselves shortly, in batches). */
    flush() {
        if (this.flushTimer !== undefined) {
            clearTimeout(this.flushTimer);
            this.flushTimer = undefined;
        }
        if (this.socket === null || this.socket.readyState !== OPEN)
            return;
        for (const [queueId, offsets] of this.pendingAcks) {
            for (let start = 0; start < offsets.length; start += ACK_CHUNK) {
                const chunk = offsets.slice(start, start + ACK_CHUNK);
                this.send(chunk.length === 1 ? { type: "ack", queue_id: queueId, offset: chunk[0] } : { type: "ack", queue_id: queueId, offsets: chunk });
            }
        }
        this.pendingAcks.clear();
        if (!this.catchingUp && this.pendingPermits > 0) {
            this.send({ type: "permit", n: this.pendingPermits });
            this.pendingPermits = 0;
        }
    }
    /** Ask the broker for the socket's credit, unacknowledged count and queue positions. */
    status() {
        if (!this.connected)
            return Promise.reject(new WharfError({ status: 0, errorCode: 0, message: "no socket is open" }));
        return new Promise((resolve, reject) => {
            this.statusWaiters.push({ resolve, reject });
            this.send({ type: "status" });
        });
    }
    // -- taking messages -----------------------------------------------------------------------------
    handOut(message) {
        this.lastTaken = message;
        this.pendingPermits++;
        this.scheduleFlush();
    }
    /** Take the oldest buffered message (there must be one). */
    takeBuffered() {
        const message = this.buffer[this.head];
        this.buffer[this.head++] = undefined;
        if (this.head > 1024 && this.head * 2 > this.buffer.length) {
            this.buffer = this.buffer.slice(this.head);
            this.head = 0;
        }
        this.handOut(message);
        this.wakeRoom();
        return message;
    }
    /** The next message; `done` once the subscription is closed. Rejects with the error that ended it. */
    next() {
        if (this.options.autoAck && this.lastTaken && !this.lastTaken.settled)
            this.lastTaken.ack();
        if (this.head < this.buffer.length)
            return Promise.resolve({ value: this.takeBuffered(), done: false });
        if (this.failure)
            return Promise.reject(this.failure);
        if (this.closing || this.finished)
            return Promise.resolve({ value: undefined, done: true });
        this.flush(); // about to wait: nothing the broker waits for may stay here
        return new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
    }
    /** Up to `max` messages: those buffered now, or else the first to arrive within `waitMs` and
     * those buffered with it. An empty array when none came in time or the subscription is closed;
     * rejects with the error that ended it. (No autoAck here: acknowledge them, or `ack(batch)`.) */
    async receive(max, waitMs = 0) {
        const taken = [];
        const drain = () => {
            while (taken.length < max && this.head < this.buffer.length)
                taken.push(this.takeBuffered());
        };
        drain();
        if (taken.length || max < 1)
            return taken;
        if (this.failure)
            throw this.failure;
        if (this.closing || this.finished || waitMs <= 0)
            return taken;
        const first = await new Promise((resolve, reject) => {
            const waiter = {
                resolve: (result) => {
                    clearTimeout(timer);
                    resolve(result.done ? null : result.value);
                },
                reject: (error) => {
                    clearTimeout(timer);
                    reject(error);
                },
            };
            const timer = setTimeout(() => {
                const index = this.waiters.indexOf(waiter);
                if (index >= 0)
                    this.waiters.splice(index, 1);
                resolve(null);
            }, waitMs);
            this.flush();
            this.waiters.push(waiter);
        });
        if (first !== null) {
            taken.push(first);
            drain();
        }
        return taken;
    }
    [Symbol.asyncIterator]() {
        return {
            next: () => this.next(),
            // Leaving a for-await loop does not close the subscription (call close()); the message in
            // hand is not acknowledged (with autoAck it is, when the next is asked for).
            return: async () => ({ value: undefined, done: true }),
        };
    }
    async runHandler(handler) {
        try {
            for (;;) {
                const result = await this.next();
                if (result.done)
                    return;
                const message = result.value;
                try {
                    await handler(message);
                    if (!message.settled)
                        message.ack();
                }
                catch (error) {
                    if (!message.settled && this.group !== undefined)
                        message.nack();
                    else
                        callBack(this.options.onError, new WharfError({ status: 0, errorCode: 0, message: `onMessage threw: ${String(error)}`, cause: error }));
                }
            }
        }
        catch {
            // the subscription ended with an error: onError and `done` report it
        }
    }
    // -- the end -------------------------------------------------------------------------------------
    /** Send the acks waiting, close the socket (1000) and end the iteration. Messages received and
     * not acknowledged are delivered again to the group. */
    async close() {
        if (this.closing) {
            await this.done.catch(() => undefined);
            return;
        }
        this.flush();
        this.closing = true;
        if (this.reconnectTimer !== undefined)
            clearTimeout(this.reconnectTimer);
        const socket = this.socket;
        if (socket === null) {
            this.finish();
            return this.done.catch(() => undefined);
        }
        const timer = setTimeout(() => this.finish(), 3000); // a broker that never answers the close
        try {
            socket.close(1000, "");
        }
        catch {
            this.finish();
        }
        await this.done.catch(() => undefined);
        clearTimeout(timer);
    }
    fail(error) {
        if (this.failure || this.finished)
            return;
        this.failure = error;
        this.closing = true;
        try {
            this.socket?.close(1000, "");
        }
        catch {
            // closing already
        }
        callBack(this.options.onError, error);
        this.readyDeferred.reject(error);
        this.doneDeferred.reject(error);
        this.finish();
    }
    finish() {
        if (this.finished)
            return;
        this.finished = true;
        this.closing = true;
        this.connectionNumber++;
        this.socket = null;
        this.stopKeepalive();
        if (this.reconnectTimer !== undefined)
            clearTimeout(this.reconnectTimer);
        if (this.flushTimer !== undefined)
            clearTimeout(this.flushTimer);
        const closedError = new WharfError({ status: 0, errorCode: 0, message: "the subscription is closed" });
        for (const waiter of this.statusWaiters.splice(0))
            waiter.reject(this.failure ?? closedError);
        for (const waiter of this.waiters.splice(0)) {
            if (this.failure)
                waiter.reject(this.failure);
            else
                waiter.resolve({ value: undefined, done: true });
        }
        this.wakeRoom();
        if (!this.failure) {
            this.readyDeferred.reject(closedError);
            this.doneDeferred.resolve();
        }
    }
}
/** Subscribe to a topic over the subscribe WebSocket; see {@link SubscribeOptions}. */
export function subscribe(options) {
    return new Subscription(options);
}

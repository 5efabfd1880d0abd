// @wharf/client 0.1.0: clients/js/dist/http.js, copied by clients/js/scripts/vendor.mjs (npm run build). Do not edit.
// Typed REST calls over fetch: the paths, parameters, bodies and answers of openapi.yaml.
import { base64url, toBase64, utf8Encode } from "./encoding.js";
import { WharfError } from "./errors.js";
/** A message object for the broker: bytes become base64. */
export function toMessageIn(message) {
    if (message.body instanceof Uint8Array) {
        return { ...message, body: toBase64(message.body), encoding: "base64" };
    }
    return message;
}
function basic(credentials) {
    return `Basic ${toBase64(utf8Encode(`${credentials.accessKey}:${credentials.secretKey}`))}`;
}
/** The broker's REST API. Every method throws a {@link WharfError} for an error answer. */
export class WharfClient {
    url;
    credentials;
    headers;
    fetchImpl;
    requestInit;
    constructor(options) {
        const resolved = typeof options === "string" ? { url: options } : options;
        this.url = resolved.url.replace(/\/+$/, "");
        this.credentials = resolved.credentials;
        this.headers = { ...resolved.headers };
        if (resolved.credentials)
            this.headers["authorization"] = basic(resolved.credentials);
        const fetchImpl = resolved.fetch ?? globalThis.fetch;
        if (typeof fetchImpl !== "function")
            throw new TypeError("no fetch: pass options.fetch");
        this.fetchImpl = fetchImpl.bind(globalThis);
        this.requestInit = { ...resolved.requestInit };
    }
    /** The WebSocket URL of a path, with the credentials as `token` (browsers cannot set headers). */
    socketUrl(path, query) {
        const url = new URL(this.url + path, typeof location === "undefined" ? undefined : location.href);
        url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
        for (const [name, value] of Object.entries(query)) {
            if (value !== undefined)
                url.searchParams.set(name, String(value));
        }
        if (this.credentials) {
            url.searchParams.set("token", base64url(`${this.credentials.accessKey}:${this.credentials.secretKey}`));
        }
        return url.toString();
    }
    /**
     * Any operation of openapi.yaml, typed by its path and method:
     * `request("get", "/v1/topics/{topic}", { path: { topic: "orders" } })`.
     */
    async request(method, path, ...[options]) {
        const opts = (options ?? {});
        let target = String(path).replace(/\{([^}]+)\}/g, (_, name) => {
            const value = opts.path?.[name];
            if (value === undefined)
                throw new TypeError(`path parameter ${name} is missing`);
            return encodeURIComponent(String(value));
        });
        const search = new URLSearchParams();
        for (const [name, value] of Object.entries(opts.query ?? {})) {
            if (value === undefined || value === null)
                continue;
            for (const item of Array.isArray(value) ? value : [value])
                search.append(name, String(item));
        }
        const query = search.toString();
        if (query)
            target += `?${query}`;
        const headers = { accept: "application/json", ...this.headers, ...opts.headers };
        const init = { ...this.requestInit, method: method.toUpperCase(), headers };
        if (opts.signal)
            init.signal = opts.signal;
        if (opts.body !== undefined) {
            headers["content-type"] = "application/json";
            init.body = JSON.stringify(opts.body);
        }
        let response;
        try {
            response = await this.fetchImpl(this.url + target, init);
        }
        catch (error) {
            throw new WharfError({
                status: 0,
                errorCode: 0,
                message: `no answer from ${this.url}: ${error.message}`,
                cause: error,
            });
        }
        const text = await response.text();
        let body = undefined;
        if (text) {
            try {
                body = JSON.parse(text);
            }
            catch {
                body = undefined;
            }
        }
        if (!response.ok)
            throw WharfError.fromEnvelope(response.status, body);
        return body;
    }
    // -- topics ------------------------------------------------------------------------------------
    /** Create a topic (201), or find it there with this configuration (200); 409 with another. */
    async createTopic(name, options = {}) {
        return (await this.request("post", "/v1/topics", { body: { ...options, name } }));
    }
    /** Create up to 1,000 topics in one call: one result per topic, in order. */
    async createTopics(topics) {
        return (await this.request("post", "/v1/topics", { body: { topics } }));
    }
    /** A page of topics, by name; pass `next_cursor` back as `cursor` for the next. */
    listTopics(options = {}) {
        const query = {};
        if (options.limit !== undefined)
            query.limit = String(options.limit);
        if (options.cursor !== undefined)
            query.cursor = options.cursor;
        return this.request("get", "/v1/topics", { query });
    }
    /** Every topic, a page at a time. */
    async *topics(pageSize = 100) {
        let cursor;
        do {
            const page = await this.listTopics(cursor === undefined ? { limit: pageSize } : { limit: pageSize, cursor });
            yield* page.topics;
            cursor = page.next_cursor ?? undefined;
        } while (cursor);
    }
    getTopic(name) {
        return this.request("get", "/v1/topics/{topic}", { path: { topic: name } });
    }
    /** Delete a topic, its queues, offsets and messages. */
    async deleteTopic(name) {
        await this.request("delete", "/v1/topics/{topic}", { path: { topic: name } });
    }
    /** The topic's queues with their min and max offsets. */
    listQueues(topic) {
        return this.request("get", "/v1/topics/{topic}/queues", { path: { topic } });
    }
    // -- messages ----------------------------------------------------------------------------------
    /** Produce a batch (one append): one result per message, in order. */
    async produce(topic, messages) {
        const answer = await this.request("post", "/v1/topics/{topic}/messages", {
            path: { topic },
            body: { messages: messages.map(toMessageIn) },
        });
        return answer.results;
    }
    /** Produce one message (the single-object form of the produce call). */
    async produceOne(topic, message) {
        const answer = await this.request("post", "/v1/topics/{topic}/messages", {
            path: { topic },
            body: toMessageIn(message),
        });
        const result = answer.results[0];
        if (result === undefined)
            throw new WharfError({ status: 0, errorCode: 0, message: "no result" });
        return result;
    }
    /** Pull one queue (JSON), long-polling up to `maxWaitMs` when nothing is new. */
    pull(topic, queueId, options = {}) {
        const query = {};
        if (options.offset !== undefined)
            query.offset = options.offset;
        if (options.maxMessages !== undefined)
            query.max_messages = options.maxMessages;
        if (options.maxWaitMs !== undefined)
            query.max_wait_ms = options.maxWaitMs;
        if (options.tags !== undefined)
            query.tags = options.tags;
        if (options.filterType !== undefined)
            query.filter_type = options.filterType;
        if (options.filter !== undefined)
            query.filter = options.filter;
        if (options.group !== undefined)
            query.group = options.group;
        if (options.commitOffset !== undefined)
            query.commit_offset = options.commitOffset;
        if (options.from !== undefined)
            query.from = String(options.from);
        const call = { path: { topic, queue_id: queueId }, query };
        if (options.signal)
            call.signal = options.signal;
        return this.request("get", "/v1/topics/{topic}/queues/{queue_id}/messages", call);
    }
    /** Messages of a topic by key (a word of their keys, or a unique id), newest first. */
    lookupByKey(topic, key, options = {}) {
        return this.request("get", "/v1/topics/{topic}/messages", { path: { topic }, query: { key, ...options } });
    }
    /** One message by its `msg_id`. */
    getMessage(msgId) {
        return this.request("get", "/v1/messages/{msg_id}", { path: { msg_id: msgId } });
    }
    // -- groups ------------------------------------------------------------------------------------
    /** Commit a group's offsets (all or nothing); with `clientId` and `generation`, a member's fenced commit. */
    commitOffsets(group, offsets, member = {}) {
        const body = { offsets };
        if (member.clientId !== undefined)
            body.client_id = member.clientId;
        if (member.generation !== undefined)
            body.generation = member.generation;
        return this.request("put", "/v1/groups/{group}/offsets", { path: { group }, body });
    }
    /** A group's committed offsets, lag included, optionally of one topic. */
    getOffsets(group, options = {}) {
        return this.request("get", "/v1/groups/{group}/offsets", { path: { group }, query: { ...options } });
    }
}

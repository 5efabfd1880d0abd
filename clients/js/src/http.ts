// Typed REST calls over fetch: the paths, parameters, bodies and answers of openapi.yaml.
import { base64url, toBase64, utf8Encode } from "./encoding.js";
import { WharfError } from "./errors.js";
import type { operations, paths } from "./openapi.js";
import type {
  GroupOffsets,
  MessageIn,
  MessageList,
  MessageOut,
  OffsetCommit,
  OutgoingMessage,
  ProduceResult,
  PullResponse,
  QueueList,
  StartFrom,
  TopicBulkResponse,
  TopicCreate,
  TopicList,
  TopicOut,
  TopicSpec,
} from "./types.js";

export type HttpMethod = "get" | "put" | "post" | "delete" | "patch";

/** The paths that have an operation for `M`. */
export type PathsWith<M extends HttpMethod> = {
  [P in keyof paths]: [NonNullable<paths[P][M]>] extends [never] ? never : P;
}[keyof paths];

/** The operation object of a path and method. */
export type Operation<P extends keyof paths, M extends HttpMethod> = NonNullable<paths[P][M]>;

type Parameters_<O> = O extends { parameters: infer X } ? X : Record<string, never>;
type PathPart<O> =
  Parameters_<O> extends { path: infer X } ? ([X] extends [never] ? { path?: never } : { path: X }) : { path?: never };
type QueryPart<O> =
  Parameters_<O> extends { query: infer X }
    ? [X] extends [never]
      ? { query?: never }
      : { query: X }
    : Parameters_<O> extends { query?: infer X }
      ? [NonNullable<X>] extends [never]
        ? { query?: never }
        : { query?: NonNullable<X> }
      : { query?: never };
type BodyPart<O> = O extends { requestBody: { content: { "application/json": infer B } } }
  ? { body: B }
  : O extends { requestBody?: { content: { "application/json": infer B } } }
    ? { body?: B }
    : { body?: never };

/** What a call of an operation takes: its path and query parameters and its JSON body. */
export type RequestOptions<O> = PathPart<O> &
  QueryPart<O> &
  BodyPart<O> & { headers?: Record<string, string>; signal?: AbortSignal };

type SuccessCode = 200 | 201 | 202 | 204;
/** The JSON of an operation's success answers (`undefined` for 204). */
export type SuccessBody<O> = O extends { responses: infer R }
  ? {
      [K in keyof R & SuccessCode]: K extends 204
        ? undefined
        : R[K] extends { content: { "application/json": infer J } }
          ? J
          : unknown;
    }[keyof R & SuccessCode]
  : never;

type RequiredKeys<T> = { [K in keyof T]-?: object extends Pick<T, K> ? never : K }[keyof T];
/** The options argument: optional when nothing in it is required. */
export type OptionsArgument<O> = [RequiredKeys<RequestOptions<O>>] extends [never]
  ? [options?: RequestOptions<O>]
  : [options: RequestOptions<O>];

export interface Credentials {
  accessKey: string;
  secretKey: string;
}

export interface ClientOptions {
  /** The broker's base URL, `http://127.0.0.1:8080` (a path prefix is kept). */
  url: string;
  /** With the broker's ACL on: sent as `Authorization: Basic` and as the WebSocket `token`. */
  credentials?: Credentials;
  /** Headers sent with every HTTP call. */
  headers?: Record<string, string>;
  /** fetch to use (default: the global one). */
  fetch?: typeof fetch;
  /** Options given to every fetch besides its method, headers, body and signal, which the client
   * sets: a page that signs in with its own form passes `{ credentials: "omit", cache: "no-store" }`,
   * so a 401 never makes the browser ask for credentials itself and no answer comes from its cache. */
  requestInit?: Omit<RequestInit, "method" | "headers" | "body" | "signal">;
}

export interface PullOptions {
  offset?: number;
  maxMessages?: number;
  maxWaitMs?: number;
  tags?: string;
  filterType?: "tag" | "sql92";
  filter?: string;
  group?: string;
  commitOffset?: number;
  from?: StartFrom;
  signal?: AbortSignal;
}

export interface LookupOptions {
  /** Stored at or after (ms since the epoch). */
  begin?: number;
  /** Stored at or before (ms); default now. */
  end?: number;
  /** Most messages (1-1000, default 32). */
  max?: number;
}

/** A message object for the broker: bytes become base64. */
export function toMessageIn(message: OutgoingMessage): MessageIn {
  if (message.body instanceof Uint8Array) {
    return { ...message, body: toBase64(message.body), encoding: "base64" };
  }
  return message as MessageIn;
}

function basic(credentials: Credentials): string {
  return `Basic ${toBase64(utf8Encode(`${credentials.accessKey}:${credentials.secretKey}`))}`;
}

/** The broker's REST API. Every method throws a {@link WharfError} for an error answer. */
export class WharfClient {
  readonly url: string;
  readonly credentials: Credentials | undefined;
  private readonly headers: Record<string, string>;
  private readonly fetchImpl: typeof fetch;
  private readonly requestInit: Omit<RequestInit, "method" | "headers" | "body" | "signal">;

  constructor(options: ClientOptions | string) {
    const resolved = typeof options === "string" ? { url: options } : options;
    this.url = resolved.url.replace(/\/+$/, "");
    this.credentials = resolved.credentials;
    this.headers = { ...resolved.headers };
    if (resolved.credentials) this.headers["authorization"] = basic(resolved.credentials);
    const fetchImpl = resolved.fetch ?? globalThis.fetch;
    if (typeof fetchImpl !== "function") throw new TypeError("no fetch: pass options.fetch");
    this.fetchImpl = fetchImpl.bind(globalThis);
    this.requestInit = { ...resolved.requestInit };
  }

  /** The WebSocket URL of a path, with the credentials as `token` (browsers cannot set headers). */
  socketUrl(path: string, query: Record<string, string | number | undefined>): string {
    const url = new URL(this.url + path, typeof location === "undefined" ? undefined : location.href);
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    for (const [name, value] of Object.entries(query)) {
      if (value !== undefined) url.searchParams.set(name, String(value));
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
  async request<M extends HttpMethod, P extends PathsWith<M>>(
    method: M,
    path: P,
    ...[options]: OptionsArgument<Operation<P, M>>
  ): Promise<SuccessBody<Operation<P, M>>> {
    const opts = (options ?? {}) as {
      path?: Record<string, string | number>;
      query?: Record<string, unknown>;
      body?: unknown;
      headers?: Record<string, string>;
      signal?: AbortSignal;
    };
    let target = String(path).replace(/\{([^}]+)\}/g, (_, name: string) => {
      const value = opts.path?.[name];
      if (value === undefined) throw new TypeError(`path parameter ${name} is missing`);
      return encodeURIComponent(String(value));
    });
    const search = new URLSearchParams();
    for (const [name, value] of Object.entries(opts.query ?? {})) {
      if (value === undefined || value === null) continue;
      for (const item of Array.isArray(value) ? value : [value]) search.append(name, String(item));
    }
    const query = search.toString();
    if (query) target += `?${query}`;
    const headers: Record<string, string> = { accept: "application/json", ...this.headers, ...opts.headers };
    const init: RequestInit = { ...this.requestInit, method: method.toUpperCase(), headers };
    if (opts.signal) init.signal = opts.signal;
    if (opts.body !== undefined) {
      headers["content-type"] = "application/json";
      init.body = JSON.stringify(opts.body);
    }
    let response: Response;
    try {
      response = await this.fetchImpl(this.url + target, init);
    } catch (error) {
      throw new WharfError({
        status: 0,
        errorCode: 0,
        message: `no answer from ${this.url}: ${(error as Error).message}`,
        cause: error,
      });
    }
    const text = await response.text();
    let body: unknown = undefined;
    if (text) {
      try {
        body = JSON.parse(text);
      } catch {
        body = undefined;
      }
    }
    if (!response.ok) throw WharfError.fromEnvelope(response.status, body);
    return body as SuccessBody<Operation<P, M>>;
  }

  // -- topics ------------------------------------------------------------------------------------

  /** Create a topic (201), or find it there with this configuration (200); 409 with another. */
  async createTopic(name: string, options: Omit<TopicCreate, "name"> = {}): Promise<TopicOut> {
    return (await this.request("post", "/v1/topics", { body: { ...options, name } })) as TopicOut;
  }

  /** Create up to 1,000 topics in one call: one result per topic, in order. */
  async createTopics(topics: TopicSpec[]): Promise<TopicBulkResponse> {
    return (await this.request("post", "/v1/topics", { body: { topics } })) as TopicBulkResponse;
  }

  /** A page of topics, by name; pass `next_cursor` back as `cursor` for the next. */
  listTopics(options: { limit?: number; cursor?: string } = {}): Promise<TopicList> {
    const query: { limit?: string; cursor?: string } = {};
    if (options.limit !== undefined) query.limit = String(options.limit);
    if (options.cursor !== undefined) query.cursor = options.cursor;
    return this.request("get", "/v1/topics", { query });
  }

  /** Every topic, a page at a time. */
  async *topics(pageSize = 100): AsyncGenerator<TopicOut> {
    let cursor: string | undefined;
    do {
      const page = await this.listTopics(cursor === undefined ? { limit: pageSize } : { limit: pageSize, cursor });
      yield* page.topics;
      cursor = page.next_cursor ?? undefined;
    } while (cursor);
  }

  getTopic(name: string): Promise<TopicOut> {
    return this.request("get", "/v1/topics/{topic}", { path: { topic: name } });
  }

  /** Delete a topic, its queues, offsets and messages. */
  async deleteTopic(name: string): Promise<void> {
    await this.request("delete", "/v1/topics/{topic}", { path: { topic: name } });
  }

  /** The topic's queues with their min and max offsets. */
  listQueues(topic: string): Promise<QueueList> {
    return this.request("get", "/v1/topics/{topic}/queues", { path: { topic } });
  }

  // -- messages ----------------------------------------------------------------------------------

  /** Produce a batch (one append): one result per message, in order. */
  async produce(topic: string, messages: OutgoingMessage[]): Promise<ProduceResult[]> {
    const answer = await this.request("post", "/v1/topics/{topic}/messages", {
      path: { topic },
      body: { messages: messages.map(toMessageIn) },
    });
    return answer.results;
  }

  /** Produce one message (the single-object form of the produce call). */
  async produceOne(topic: string, message: OutgoingMessage): Promise<ProduceResult> {
    const answer = await this.request("post", "/v1/topics/{topic}/messages", {
      path: { topic },
      body: toMessageIn(message),
    });
    const result = answer.results[0];
    if (result === undefined) throw new WharfError({ status: 0, errorCode: 0, message: "no result" });
    return result;
  }

  /** Pull one queue (JSON), long-polling up to `maxWaitMs` when nothing is new. */
  pull(topic: string, queueId: number, options: PullOptions = {}): Promise<PullResponse> {
    const query: NonNullable<operations["pullMessages"]["parameters"]["query"]> = {};
    if (options.offset !== undefined) query.offset = options.offset;
    if (options.maxMessages !== undefined) query.max_messages = options.maxMessages;
    if (options.maxWaitMs !== undefined) query.max_wait_ms = options.maxWaitMs;
    if (options.tags !== undefined) query.tags = options.tags;
    if (options.filterType !== undefined) query.filter_type = options.filterType;
    if (options.filter !== undefined) query.filter = options.filter;
    if (options.group !== undefined) query.group = options.group;
    if (options.commitOffset !== undefined) query.commit_offset = options.commitOffset;
    if (options.from !== undefined) query.from = String(options.from);
    const call: RequestOptions<operations["pullMessages"]> = { path: { topic, queue_id: queueId }, query };
    if (options.signal) call.signal = options.signal;
    return this.request("get", "/v1/topics/{topic}/queues/{queue_id}/messages", call);
  }

  /** Messages of a topic by key (a word of their keys, or a unique id), newest first. */
  lookupByKey(topic: string, key: string, options: LookupOptions = {}): Promise<MessageList> {
    return this.request("get", "/v1/topics/{topic}/messages", { path: { topic }, query: { key, ...options } });
  }

  /** One message by its `msg_id`. */
  getMessage(msgId: string): Promise<MessageOut> {
    return this.request("get", "/v1/messages/{msg_id}", { path: { msg_id: msgId } }) as Promise<MessageOut>;
  }

  // -- groups ------------------------------------------------------------------------------------

  /** Commit a group's offsets (all or nothing); with `clientId` and `generation`, a member's fenced commit. */
  commitOffsets(
    group: string,
    offsets: OffsetCommit[],
    member: { clientId?: string; generation?: number } = {},
  ): Promise<GroupOffsets> {
    const body: { offsets: OffsetCommit[]; client_id?: string; generation?: number } = { offsets };
    if (member.clientId !== undefined) body.client_id = member.clientId;
    if (member.generation !== undefined) body.generation = member.generation;
    return this.request("put", "/v1/groups/{group}/offsets", { path: { group }, body });
  }

  /** A group's committed offsets, lag included, optionally of one topic. */
  getOffsets(group: string, options: { topic?: string } = {}): Promise<GroupOffsets> {
    return this.request("get", "/v1/groups/{group}/offsets", { path: { group }, query: { ...options } });
  }
}

// @wharf/client 0.1.0: clients/js/dist/records.js, copied by clients/js/scripts/vendor.mjs (npm run build). Do not edit.
// Wharf's binary formats: the stored CommitLog records of a `format=binary` messages frame (and of a
// pull with `Accept: application/vnd.wharf.records`), and the `application/vnd.wharf.batch` produce
// batch. All integers are big-endian. Layouts: the broker's app/store/record_format.py and app/codec.py.
import { encodeBody, fromBase64, hex, utf8Decode, utf8Encode } from "./encoding.js";
import { WharfError } from "./errors.js";
const MESSAGE_MAGIC = 0xdaa320a7 | 0; // stored as a signed int32
const FIXED_SIZE = 91;
const SYSFLAG_BORNHOST_V6 = 0x10;
const SYSFLAG_STOREHOST_V6 = 0x20;
const RETRY_TOPIC_PREFIX = "%RETRY%";
function formatError(message) {
    return new WharfError({ status: 0, errorCode: 0, message });
}
function int64(view, at) {
    return Number(view.getBigInt64(at));
}
/** `name\x01value\x02...` */
export function decodeProperties(bytes) {
    const properties = {};
    if (!bytes.length)
        return properties;
    for (const item of utf8Decode(bytes).split("\x02")) {
        if (!item)
            continue;
        const cut = item.indexOf("\x01");
        if (cut < 0)
            properties[item] = "";
        else
            properties[item.slice(0, cut)] = item.slice(cut + 1);
    }
    return properties;
}
/** One stored record at `offset` of `data` as the pull API's message object. */
export function decodeRecord(data, offset = 0) {
    const view = new DataView(data.buffer, data.byteOffset + offset, data.byteLength - offset);
    if (view.byteLength < FIXED_SIZE)
        throw formatError(`a record needs ${FIXED_SIZE} bytes, ${view.byteLength} left`);
    const size = view.getInt32(0);
    if (view.getInt32(4) !== MESSAGE_MAGIC || size < FIXED_SIZE || size > view.byteLength) {
        throw formatError(`no message record at ${offset}`);
    }
    const queueId = view.getInt32(12);
    const queueOffset = int64(view, 20);
    const sysflag = view.getInt32(36);
    const bornTimestamp = int64(view, 40);
    const bornHostSize = sysflag & SYSFLAG_BORNHOST_V6 ? 20 : 8;
    const storeHostSize = sysflag & SYSFLAG_STOREHOST_V6 ? 20 : 8;
    const storeTimestampAt = 48 + bornHostSize;
    const storeHostAt = storeTimestampAt + 8;
    const reconsumeAt = storeHostAt + storeHostSize;
    const bodyLengthAt = reconsumeAt + 4 + 8;
    const storeTimestamp = int64(view, storeTimestampAt);
    const reconsumeTimes = view.getInt32(reconsumeAt);
    const bodyLength = view.getInt32(bodyLengthAt);
    const bodyAt = bodyLengthAt + 4;
    const topicAt = bodyAt + bodyLength;
    if (bodyLength < 0 || topicAt + 3 > size)
        throw formatError(`record at ${offset} has a bad body length`);
    const start = data.byteOffset + offset;
    const bytes = new Uint8Array(data.buffer, start + bodyAt, bodyLength);
    const topicLength = view.getUint8(topicAt);
    const topic = utf8Decode(new Uint8Array(data.buffer, start + topicAt + 1, topicLength));
    const propertiesAt = topicAt + 1 + topicLength;
    const propertiesLength = view.getUint16(propertiesAt);
    if (propertiesAt + 2 + propertiesLength > size)
        throw formatError(`record at ${offset} has bad properties`);
    const properties = decodeProperties(new Uint8Array(data.buffer, start + propertiesAt + 2, propertiesLength));
    const tags = properties["TAGS"] ?? "";
    const keys = properties["KEYS"] ?? "";
    const uniqueId = properties["UNIQ_KEY"] ?? "";
    delete properties["TAGS"];
    delete properties["KEYS"];
    delete properties["UNIQ_KEY"];
    const idBytes = new Uint8Array(storeHostSize + 8);
    idBytes.set(new Uint8Array(data.buffer, start + storeHostAt, storeHostSize));
    idBytes.set(new Uint8Array(data.buffer, start + 28, 8), storeHostSize);
    const { body, encoding } = encodeBody(bytes);
    const message = {
        msg_id: hex(idBytes),
        unique_id: uniqueId,
        topic,
        queue_id: queueId,
        queue_offset: queueOffset,
        tags,
        keys: keys ? keys.split(/\s+/).filter(Boolean) : [],
        properties,
        body,
        encoding,
        born_timestamp: bornTimestamp,
        store_timestamp: storeTimestamp,
        reconsume_times: reconsumeTimes,
    };
    const original = properties["RETRY_TOPIC"];
    if (original && topic.startsWith(RETRY_TOPIC_PREFIX)) {
        // As a group's consumer sees it (the broker's as_consumed): under the topic it was produced to.
        message.retry_topic = topic;
        message.topic = original;
    }
    return { message, bytes };
}
/** Every record of a binary frame or a records pull answer, in order. */
export function decodeRecords(data) {
    const bytes = data instanceof Uint8Array ? data : new Uint8Array(data);
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const records = [];
    let position = 0;
    while (position < bytes.byteLength) {
        if (bytes.byteLength - position < 4)
            throw formatError(`${bytes.byteLength - position} stray bytes at ${position}`);
        const size = view.getInt32(position);
        if (size <= 0 || position + size > bytes.byteLength) {
            throw formatError(`record at ${position} has an impossible size ${size}`);
        }
        records.push(decodeRecord(bytes.subarray(0, position + size), position));
        position += size;
    }
    return records;
}
const DELAY_PROPERTIES = [
    ["delay_level", "DELAY"],
    ["delay_ms", "TIMER_DELAY_MS"],
    ["deliver_at_ms", "TIMER_DELIVER_MS"],
];
/** The `application/vnd.wharf.batch` bytes of `messages` (a binary produce frame or request body). */
export function encodeBatch(messages) {
    const parts = [];
    let total = 8;
    const head = new Uint8Array(8);
    head.set(utf8Encode("WHB1"));
    new DataView(head.buffer).setUint32(4, messages.length);
    parts.push(head);
    for (const message of messages) {
        const properties = { ...(message.properties ?? {}) };
        for (const [field, name] of DELAY_PROPERTIES) {
            const value = message[field];
            if (value !== undefined && value !== null)
                properties[name] = String(value);
        }
        const texts = [
            message.tags ?? "",
            Array.isArray(message.keys) ? message.keys.join(" ") : (message.keys ?? ""),
            message.unique_id ?? "",
            message.sharding_key ?? "",
        ].map(utf8Encode);
        const props = utf8Encode(Object.entries(properties)
            .map(([name, value]) => `${name}\x01${value}\x02`)
            .join(""));
        let body;
        if (message.body instanceof Uint8Array)
            body = message.body;
        else if (message.encoding === "base64")
            body = fromBase64(message.body);
        else
            body = utf8Encode(message.body);
        const size = 16 + texts.reduce((sum, text) => sum + 2 + text.length, 0) + 4 + props.length + 4 + body.length;
        const part = new Uint8Array(size);
        const view = new DataView(part.buffer);
        view.setInt32(0, message.queue_id ?? -1);
        view.setInt32(4, 0);
        view.setBigInt64(8, 0n);
        let at = 16;
        for (const text of texts) {
            if (text.length > 0xffff)
                throw new RangeError("a text field of a batch message is over 65535 bytes");
            view.setUint16(at, text.length);
            part.set(text, at + 2);
            at += 2 + text.length;
        }
        view.setUint32(at, props.length);
        part.set(props, at + 4);
        at += 4 + props.length;
        view.setUint32(at, body.length);
        part.set(body, at + 4);
        parts.push(part);
        total += size;
    }
    const out = new Uint8Array(total);
    let at = 0;
    for (const part of parts) {
        out.set(part, at);
        at += part.length;
    }
    return out;
}

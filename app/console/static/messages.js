// Messages as the console shows them everywhere (lookup, browse, live tail): every field the
// broker stores for a message, long bodies cut with a button to show them whole.

export const BODY_PREVIEW_CHARS = 160;
const BODY_PREVIEW_LINES = 4;

export const MESSAGE_COLUMNS = ["stored", "topic", "queue / offset", "tags", "keys", "unique id", "properties", "body", "msg id"];

export function el(tag, props = {}, children = []) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (name === "text") node.textContent = value;
    else if (name === "className") node.className = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) node.append(child);
  return node;
}

/** A table cell that names its column: on a phone, rows become cards labelled from `data-label`. */
export function cell(label, content = "", className = "") {
  const props = { "data-label": label };
  if (className) props.className = className;
  if (typeof content === "string") return el("td", { ...props, text: content });
  // One grid item beside the label, however many nodes the content has.
  return el("td", props, [Array.isArray(content) ? el("div", {}, content) : content]);
}

export function formatTime(ms) {
  return ms ? new Date(ms).toLocaleTimeString() : "-";
}

function preview(text) {
  let cut = text.length > BODY_PREVIEW_CHARS ? BODY_PREVIEW_CHARS : text.length;
  let lines = 0;
  for (let i = 0; i < cut; i++) {
    if (text[i] === "\n" && ++lines === BODY_PREVIEW_LINES) {
      cut = i;
      break;
    }
  }
  return cut < text.length ? text.slice(0, cut) : null;
}

// How bodies are shown: "text" (as the broker answers, base64 for binary bodies), "json" (parsed
// and indented) or "hex" (the bytes).
let bodyFormat = "text";

export function setBodyFormat(format) {
  bodyFormat = format;
}

function bodyBytes(message) {
  if (message.encoding === "base64") return Uint8Array.from(atob(message.body), (char) => char.charCodeAt(0));
  return new TextEncoder().encode(message.body);
}

/** The body in the chosen format, and a note on how it is shown. */
function rendered(message) {
  if (bodyFormat === "hex") {
    const bytes = bodyBytes(message);
    const hex = Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join(" ");
    return { text: hex, note: `hex, ${bytes.length} bytes ` };
  }
  if (bodyFormat === "json") {
    try {
      const text = message.encoding === "base64" ? new TextDecoder().decode(bodyBytes(message)) : message.body;
      return { text: JSON.stringify(JSON.parse(text), null, 2), note: "JSON " };
    } catch {
      return { text: message.body, note: "not JSON: as text " };
    }
  }
  return { text: message.body, note: message.encoding === "base64" ? "base64 " : "" };
}

/** The body, cut at BODY_PREVIEW_CHARS characters or BODY_PREVIEW_LINES lines behind a toggle. */
export function bodyView(message) {
  const { text, note: noteText } = rendered(message);
  const note = noteText ? [el("span", { className: "encoding", text: noteText })] : [];
  const short = preview(text);
  if (short === null) return el("div", { className: "body" }, [...note, el("span", { className: "body-text", text })]);
  const shown = el("span", { className: "body-text", text: `${short}…` });
  const toggle = el("button", {
    type: "button",
    className: "expand",
    "aria-expanded": "false",
    text: `show all ${text.length.toLocaleString("en-US")} characters`,
  });
  toggle.addEventListener("click", () => {
    const open = toggle.getAttribute("aria-expanded") !== "true";
    shown.textContent = open ? text : `${short}…`;
    toggle.setAttribute("aria-expanded", String(open));
    toggle.textContent = open ? "show less" : `show all ${text.length.toLocaleString("en-US")} characters`;
  });
  return el("div", { className: "body cut" }, [...note, shown, el("br"), toggle]);
}

function propertiesView(properties) {
  const names = Object.keys(properties || {}).sort();
  if (!names.length) return "";
  return el("ul", { className: "props" }, names.map((name) =>
    el("li", {}, [el("span", { className: "prop-name", text: name }), `=${properties[name]}`])));
}

export function messageRow(message) {
  return el("tr", { "data-msg-id": message.msg_id, "data-unique-id": message.unique_id || "" }, [
    cell("stored", formatTime(message.store_timestamp)),
    cell("topic", message.topic),
    cell("queue / offset", `${message.queue_id} / ${message.queue_offset}`),
    cell("tags", message.tags, "tags"),
    cell("keys", message.keys.join(" "), "keys"),
    cell("unique id", message.unique_id || "", "id unique-id"),
    cell("properties", propertiesView(message.properties), "properties"),
    cell("body", bodyView(message), "body-cell"),
    cell("msg id", message.msg_id, "id msg-id"),
  ]);
}

export function messageHead() {
  return el("thead", {}, [el("tr", {}, MESSAGE_COLUMNS.map((name) => el("th", { text: name })))]);
}

export function messageTable(messages, empty = "no message found") {
  if (!messages.length) return el("p", { className: "muted", text: empty });
  return el("table", { className: "messages cards-on-phone" }, [messageHead(), el("tbody", {}, messages.map(messageRow))]);
}

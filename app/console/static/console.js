// Wharf console: plain JavaScript over the broker's HTTP API and WebSocket subscription.
"use strict";

const REFRESH_MS = 2000;
const TAIL_CREDIT = 100;
const TAIL_ROWS = 200;
const RATE_POINTS = 60;

const $ = (selector) => document.querySelector(selector);

function el(tag, props = {}, children = []) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (name === "text") node.textContent = value;
    else if (name === "className") node.className = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) node.append(child);
  return node;
}

async function api(path, options = {}) {
  const response = await fetch(path, options);
  const text = await response.text();
  const body = text ? JSON.parse(text) : null;
  if (!response.ok) {
    const message = body && body.message ? `${body.error_code}: ${body.message}` : `HTTP ${response.status}`;
    throw new Error(message);
  }
  return body;
}

function formatNumber(value) {
  return Number(value).toLocaleString("en-US");
}

function formatTime(ms) {
  return ms ? new Date(ms).toLocaleTimeString() : "-";
}

function replaceRows(tbody, rows, empty = "none yet") {
  if (rows.length) {
    tbody.replaceChildren(...rows);
  } else {
    const columns = tbody.closest("table").querySelectorAll("thead th").length;
    tbody.replaceChildren(el("tr", { className: "empty" }, [el("td", { colspan: String(columns), className: "muted", text: empty })]));
  }
}

// -- overview, topics, groups ------------------------------------------------------------------

const history = [];
const PAGE = 100;

// Where each list is: the cursors of the pages before the one shown (null: the first page), and
// the cursor of the next page as the last answer gave it.
const paging = {
  topics: { cursors: [null], next: null },
  groups: { cursors: [null], next: null },
};

function showPage(name, total, shown) {
  const state = paging[name];
  const first = (state.cursors.length - 1) * PAGE;
  $(`#${name}-page`).textContent = shown
    ? `${formatNumber(first + 1)}–${formatNumber(first + shown)} of ${formatNumber(total)}`
    : `none of ${formatNumber(total)}`;
  $(`#${name}-prev`).disabled = state.cursors.length === 1;
  $(`#${name}-next`).disabled = !state.next;
}

function turnPage(name, forward) {
  const state = paging[name];
  if (forward && state.next) state.cursors.push(state.next);
  else if (!forward && state.cursors.length > 1) state.cursors.pop();
  else return;
  refresh();
}

function renderOverview(data) {
  const broker = data.broker;
  $("#broker-identity").textContent =
    `${broker.cluster} / ${broker.broker_name} (id ${broker.broker_id}) at ${broker.address}`;
  $("#stat-topics").textContent = formatNumber(data.totals.topics);
  $("#stat-stored").textContent = formatNumber(data.totals.stored);
  $("#stat-groups").textContent = formatNumber(data.totals.groups);
  $("#stat-held").textContent = formatNumber(data.stats.held_pulls);
  $("#stat-commitlog").textContent = formatNumber(data.stats.commitlog_max_offset);

  replaceRows($("#topics-table tbody"), data.topics.map((topic) => el("tr", { "data-topic": topic.name }, [
    el("td", { text: topic.name }),
    el("td", { text: `${topic.read_queues} / ${topic.write_queues}` }),
    el("td", { text: String(topic.perm) }),
    el("td", { text: formatNumber(topic.messages) }),
    el("td", {}, topic.queues.map((queue) =>
      el("span", { className: "queue", text: `#${queue.queue_id}: ${queue.min_offset}..${queue.max_offset}` }))),
  ])), "no topic yet");

  replaceRows($("#groups-table tbody"), data.groups.map((group) => el("tr", { "data-group": group.group }, [
    el("td", { text: group.group }),
    el("td", { text: group.topic }),
    el("td", { text: String(group.subscribers) }),
    el("td", { text: formatNumber(group.lag) }),
    el("td", {}, group.queues.map((queue) => el("span", {
      className: "queue",
      text: `#${queue.queue_id}: lag ${queue.lag} (${queue.committed_offset ?? "-"} / ${queue.max_offset})`,
    }))),
  ])), "no consumer group has an offset yet");

  paging.topics.next = data.topics_next_cursor;
  paging.groups.next = data.groups_next_cursor;
  showPage("topics", data.totals.topics, data.topics.length);
  showPage("groups", data.totals.groups, data.groups.length);

  const names = $("#topic-names");
  names.replaceChildren(...data.topics.map((topic) => el("option", { value: topic.name })));

  history.push({ t: performance.now(), stored: data.totals.stored, consumed: data.totals.consumed });
  if (history.length > RATE_POINTS + 1) history.shift();
  drawRates();
}

function drawRates() {
  const canvas = $("#rate-chart");
  const context = canvas.getContext("2d");
  const { width, height } = canvas;
  context.clearRect(0, 0, width, height);
  const rates = [];
  for (let i = 1; i < history.length; i++) {
    const seconds = (history[i].t - history[i - 1].t) / 1000 || 1;
    rates.push({
      produce: Math.max(0, (history[i].stored - history[i - 1].stored) / seconds),
      consume: Math.max(0, (history[i].consumed - history[i - 1].consumed) / seconds),
    });
  }
  const peak = Math.max(1, ...rates.map((rate) => Math.max(rate.produce, rate.consume)));
  context.fillStyle = "#6b7385";
  context.font = "11px sans-serif";
  context.fillText(`${Math.round(peak)}/s`, 4, 12);
  const step = width / RATE_POINTS;
  for (const [field, color] of [["produce", "#1f6feb"], ["consume", "#2da44e"]]) {
    context.strokeStyle = color;
    context.lineWidth = 2;
    context.beginPath();
    rates.forEach((rate, index) => {
      const x = width - (rates.length - index) * step;
      const y = height - 4 - (rate[field] / peak) * (height - 20);
      if (index === 0) context.moveTo(x, y);
      else context.lineTo(x, y);
    });
    context.stroke();
  }
}

async function renderClusters() {
  const note = $("#clusters-note");
  try {
    const data = await api("/v1/clusters");
    const rows = [];
    for (const cluster of data.clusters) {
      for (const broker of cluster.brokers) {
        rows.push(el("tr", {}, [
          el("td", { text: cluster.name }),
          el("td", { text: broker.broker_name }),
          el("td", { text: String(broker.broker_id) }),
          el("td", { text: broker.address }),
          el("td", { text: broker.alive ? "yes" : "no", className: broker.alive ? "" : "error" }),
          el("td", { text: formatTime(broker.last_heartbeat_ms) }),
        ]));
      }
    }
    replaceRows($("#clusters-table tbody"), rows);
    note.textContent = "";
  } catch (error) {
    note.textContent = `cluster view unavailable: ${error.message}`;
  }
}

let refreshes = 0;

async function refresh() {
  const badge = $("#connection");
  const seq = ++refreshes;
  try {
    const params = new URLSearchParams();
    const topicsCursor = paging.topics.cursors.at(-1);
    const groupsCursor = paging.groups.cursors.at(-1);
    if (topicsCursor) params.set("topics_cursor", topicsCursor);
    if (groupsCursor) params.set("groups_cursor", groupsCursor);
    const data = await api(`/console/api/overview?${params}`);
    if (seq !== refreshes) return; // a newer refresh (a page turned meanwhile) answers instead
    renderOverview(data);
    badge.textContent = "live";
    badge.className = "badge ok";
  } catch (error) {
    badge.textContent = `offline: ${error.message}`;
    badge.className = "badge bad";
  }
}

// -- lookup ------------------------------------------------------------------------------------

function messageTable(messages) {
  if (!messages.length) return el("p", { className: "muted", text: "no message found" });
  return el("table", {}, [
    el("thead", {}, [el("tr", {}, ["msg id", "topic", "queue / offset", "tags", "keys", "stored", "body"]
      .map((name) => el("th", { text: name })))]),
    el("tbody", {}, messages.map((message) => el("tr", {}, [
      el("td", { className: "id", text: message.msg_id }),
      el("td", { text: message.topic }),
      el("td", { text: `${message.queue_id} / ${message.queue_offset}` }),
      el("td", { text: message.tags }),
      el("td", { text: message.keys.join(" ") }),
      el("td", { text: formatTime(message.store_timestamp) }),
      el("td", { className: "body", text: message.body }),
    ]))),
  ]);
}

function updateLookupFields() {
  const mode = $("#lookup-mode").value;
  $("#lookup-id").hidden = mode !== "id";
  $("#lookup-topic").hidden = mode === "id";
  $("#lookup-key").hidden = mode !== "key";
  $("#lookup-queue").hidden = mode !== "offset";
  $("#lookup-offset").hidden = mode !== "offset";
}

async function lookup(event) {
  event.preventDefault();
  const out = $("#lookup-result");
  const mode = $("#lookup-mode").value;
  const topic = encodeURIComponent($("#lookup-topic").value.trim());
  try {
    let messages;
    if (mode === "id") {
      messages = [await api(`/v1/messages/${encodeURIComponent($("#lookup-id").value.trim())}`)];
    } else if (mode === "key") {
      const key = encodeURIComponent($("#lookup-key").value.trim());
      messages = (await api(`/v1/topics/${topic}/messages?key=${key}&max=20`)).messages;
    } else {
      const queue = Number($("#lookup-queue").value || 0);
      const offset = Number($("#lookup-offset").value || 0);
      const answer = await api(`/v1/topics/${topic}/queues/${queue}/messages?offset=${offset}&max_messages=1`);
      messages = answer.messages.filter((message) => message.queue_offset === offset);
    }
    out.replaceChildren(messageTable(messages));
  } catch (error) {
    out.replaceChildren(el("p", { className: "error", text: error.message }));
  }
}

// -- live tail ---------------------------------------------------------------------------------

let tailSocket = null;

function tailState(text, bad = false) {
  const state = $("#tail-state");
  state.textContent = text;
  state.className = bad ? "error" : "muted";
}

function startTail(event) {
  event.preventDefault();
  stopTail();
  const topic = $("#tail-topic").value.trim();
  const params = new URLSearchParams({ topic, from: "last", credit: String(TAIL_CREDIT) });
  const tags = $("#tail-tags").value.trim();
  if (tags) params.set("tags", tags);
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const socket = new WebSocket(`${scheme}//${location.host}/v1/ws/subscribe?${params}`);
  tailSocket = socket;
  $("#tail-rows").replaceChildren();
  tailState("connecting");
  $("#tail-start").disabled = true;
  $("#tail-stop").disabled = false;
  socket.onmessage = (message) => {
    const frame = JSON.parse(message.data);
    if (frame.type === "assignment") {
      tailState(`tailing ${frame.topic} (${frame.queues.length} queues)`);
    } else if (frame.type === "messages") {
      const rows = $("#tail-rows");
      for (const item of frame.messages) {
        rows.prepend(el("tr", { "data-msg-id": item.msg_id }, [
          el("td", { text: formatTime(item.store_timestamp) }),
          el("td", { text: `${item.queue_id} / ${item.queue_offset}` }),
          el("td", { text: item.tags }),
          el("td", { text: item.keys.join(" ") }),
          el("td", { className: "body", text: item.body }),
          el("td", { className: "id", text: item.msg_id }),
        ]));
      }
      while (rows.children.length > TAIL_ROWS) rows.lastElementChild.remove();
      // Grant back what was delivered: the broker never has more than TAIL_CREDIT in flight.
      socket.send(JSON.stringify({ type: "permit", n: frame.messages.length }));
    }
  };
  socket.onclose = (close) => {
    if (tailSocket === socket) {
      tailSocket = null;
      const reason = close.reason ? `: ${close.reason}` : "";
      tailState(`closed (${close.code})${reason}`, close.code !== 1000 && close.code !== 1005);
      $("#tail-start").disabled = false;
      $("#tail-stop").disabled = true;
    }
  };
}

function stopTail() {
  if (tailSocket) {
    const socket = tailSocket;
    tailSocket = null;
    socket.close(1000);
    tailState("stopped");
  }
  $("#tail-start").disabled = false;
  $("#tail-stop").disabled = true;
}

// -- produce -----------------------------------------------------------------------------------

async function produce(event) {
  event.preventDefault();
  const out = $("#produce-result");
  const topic = $("#produce-topic").value.trim();
  const message = { body: $("#produce-body").value };
  const tags = $("#produce-tags").value.trim();
  const keys = $("#produce-keys").value.trim();
  if (tags) message.tags = tags;
  if (keys) message.keys = keys.split(/\s+/);
  try {
    const answer = await api(`/v1/topics/${encodeURIComponent(topic)}/messages`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(message),
    });
    out.className = "";
    out.textContent = JSON.stringify(answer.results[0], null, 2);
    refresh();
  } catch (error) {
    out.className = "error";
    out.textContent = error.message;
  }
}

// -- start -------------------------------------------------------------------------------------

$("#lookup-mode").addEventListener("change", updateLookupFields);
$("#lookup-form").addEventListener("submit", lookup);
$("#tail-form").addEventListener("submit", startTail);
$("#tail-stop").addEventListener("click", stopTail);
$("#produce-form").addEventListener("submit", produce);
for (const name of Object.keys(paging)) {
  $(`#${name}-prev`).addEventListener("click", () => turnPage(name, false));
  $(`#${name}-next`).addEventListener("click", () => turnPage(name, true));
}
updateLookupFields();
refresh();
renderClusters();
setInterval(refresh, REFRESH_MS);
setInterval(renderClusters, REFRESH_MS * 5);

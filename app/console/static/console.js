// Wharf console: plain JavaScript over the broker's HTTP API and WebSocket subscription, called
// through @wharf/client (see api.js).
import { ApiError, api, clearCredentials, credentials, on, saveCredentials, tail } from "./api.js";
import { drawRates } from "./chart.js";
import { cell, el, formatTime, messageHead, messageRow, messageTable, setBodyFormat } from "./messages.js";
import {
  access, applyAccess, cancelPromote, closeGroup, forceClicked, currentGroup, loadAccess, moreDeadLetters, pressTwice, promoteClicked,
  refreshGroup, renderDelays, renderReplication, renderTransactions, resendAll, runningMembers, showDeadLetters, skipAll,
  showGroup,
} from "./operator.js";
import { changeTopic, fillTopicChange } from "./topic_change.js";
import { formatNumber } from "./view.js";

const REFRESH_MS = 2000;
const RATE_WINDOW_MS = 120_000;
const TAIL_CREDIT = 100;
const TAIL_ROWS = 200;
const BROWSE_PER_QUEUE = 20;
const BROWSE_ROWS = 50;
const BROWSE_PARALLEL = 8;
const PAGE = 100;
const DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h";

const $ = (selector) => document.querySelector(selector);

function replaceRows(tbody, rows, empty = "none yet") {
  if (rows.length) {
    tbody.replaceChildren(...rows);
  } else {
    const columns = tbody.closest("table").querySelectorAll("thead th").length;
    tbody.replaceChildren(el("tr", { className: "empty" }, [el("td", { colspan: String(columns), className: "muted", text: empty })]));
  }
}

/**
 * Sets `tbody`'s rows to one per item, keeping each item's row and the cells of it that have not
 * changed: a refresh every 2 s must not take a button away from under a finger or a pointer.
 */
function updateRows(tbody, items, keyOf, render, empty) {
  const old = new Map();
  for (const row of tbody.children) if (row.dataset.key !== undefined) old.set(row.dataset.key, row);
  const rows = items.map((item) => {
    const key = keyOf(item);
    const signature = JSON.stringify([item, confirmingDelete === key]);
    const kept = old.get(key);
    if (kept && kept.dataset.signature === signature) return kept;
    const row = render(item);
    if (kept) {
      patchCells(kept, row);
      kept.dataset.signature = signature;
      return kept;
    }
    row.dataset.key = key;
    row.dataset.signature = signature;
    return row;
  });
  const current = [...tbody.children];
  if (!rows.length && current.length === 1 && current[0].classList.contains("empty")) return;
  if (!rows.length && !current.length) {
    replaceRows(tbody, rows, empty);
    return;
  }
  if (rows.length !== current.length || rows.some((row, index) => row !== current[index])) {
    replaceRows(tbody, rows, empty);
  }
}

/** Gives `kept` the cells of `fresh` that differ, so an unchanged cell (and its buttons) stays. */
function patchCells(kept, fresh) {
  const before = [...kept.children];
  const after = [...fresh.children];
  if (before.length !== after.length) {
    kept.replaceChildren(...after);
    return;
  }
  after.forEach((cell, index) => {
    if (before[index].outerHTML !== cell.outerHTML) before[index].replaceWith(cell);
  });
}

function show(node, text, bad = false) {
  node.textContent = text;
  node.classList.toggle("error", bad);
  node.classList.toggle("muted", !bad);
}

// -- sign-in, "not allowed", "broker unreachable" ------------------------------------------------

function showAccount() {
  const stored = credentials();
  $("#account").hidden = !stored;
  $("#account-name").textContent = stored ? `signed in as ${stored.accessKey}` : "";
}

function openSignIn(rejected) {
  const form = $("#signin");
  const error = $("#signin-error");
  if (rejected || form.hidden) {
    // A refresh refused while the form is open leaves its message alone.
    error.hidden = !rejected;
    error.textContent = rejected ? "The broker did not accept this access key and secret key." : "";
  }
  if (form.hidden) {
    form.hidden = false;
    $("#signin-secret").value = "";
    $(rejected ? "#signin-secret" : "#signin-access").focus();
  }
  stopTail();
  showAccount();
  $("#connection").textContent = "sign-in needed";
  $("#connection").className = "badge bad";
}

function signIn(event) {
  event.preventDefault();
  saveCredentials($("#signin-access").value.trim(), $("#signin-secret").value);
  $("#signin").hidden = true;
  showAccount();
  loadAccess().then(() => {
    refresh();
    renderClusters();
  });
}

function signOut() {
  clearCredentials();
  // A fresh page forgets everything the broker showed to the account.
  location.reload();
}

const NOTICES = 3;

/** Shows `text` on top of the notices (once: a refresh refused every 2 s does not push the others out). */
function showNotice(text) {
  const list = $("#notice-list");
  for (const item of list.children) if (item.textContent === text) item.remove();
  list.prepend(el("li", { text }));
  while (list.children.length > NOTICES) list.lastElementChild.remove();
  $("#notice").hidden = false;
}

on("signInNeeded", openSignIn);
on("forbidden", showNotice);

let unreachableSince = null;

function reachable(ok, reason = "") {
  const banner = $("#unreachable");
  if (ok) {
    unreachableSince = null;
    banner.hidden = true;
    return;
  }
  unreachableSince ??= Date.now();
  $("#unreachable-reason").textContent = reason;
  $("#unreachable-since").textContent = formatTime(unreachableSince);
  banner.hidden = false;
}

// -- overview, topics, groups ------------------------------------------------------------------

const samples = [];

// Where each list is: the cursors of the pages before the one shown (null: the first page), and
// the cursor of the next page as the last answer gave it.
const paging = {
  topics: { cursors: [null], next: null },
  groups: { cursors: [null], next: null },
};

// What the search boxes asked for, as last submitted.
const searches = { topics: "", groups: "" };

function search(name, event) {
  event.preventDefault();
  searches[name] = $(`#${name}-search`).value.trim();
  paging[name] = { cursors: [null], next: null };
  refresh();
}

function showPage(name, total, shown) {
  const state = paging[name];
  const first = (state.cursors.length - 1) * PAGE;
  const of = total === null ? "" : ` of ${formatNumber(total)}`;
  $(`#${name}-page`).textContent = shown
    ? `${formatNumber(first + 1)}–${formatNumber(first + shown)}${of}`
    : `none${of}`;
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

// The topic whose delete waits for a second click; it survives the table's redraws.
let confirmingDelete = null;

function topicActions(topic) {
  const name = topic.name;
  if (confirmingDelete === name) {
    // The name typed again, as the broker cannot take a delete back.
    const typed = el("input", { className: "confirm-name", "aria-label": `type ${name} to confirm`, placeholder: name, autocomplete: "off" });
    const yes = el("button", { type: "button", className: "danger confirm-delete", text: "Delete" });
    const no = el("button", { type: "button", className: "cancel-delete", text: "Cancel" });
    const why = el("span", { className: "error confirm-why", role: "alert" });
    const attempt = () => {
      if (typed.value.trim() === name) deleteTopic(name);
      else why.textContent = `type ${name} exactly to delete it`;
    };
    yes.addEventListener("click", attempt);
    typed.addEventListener("keydown", (event) => {
      if (event.key === "Enter") attempt();
      if (event.key === "Escape") no.click();
    });
    no.addEventListener("click", () => {
      confirmingDelete = null;
      refresh();
    });
    queueMicrotask(() => typed.focus());
    return el("div", { className: "actions" }, [
      el("span", { className: "error", text: `Delete ${name} and all its messages? Type its name:` }), typed, yes, no, why,
    ]);
  }
  const browse = el("button", { type: "button", className: "browse", text: "Messages" });
  // A group's retry and dead-letter topics are the broker's: it refuses to change them.
  const change = name.startsWith("%RETRY%") || name.startsWith("%DLQ%")
    ? null : el("button", { type: "button", className: "change-topic admin-only", text: "Change" });
  const remove = el("button", { type: "button", className: "danger delete-topic admin-only", text: "Delete" });
  browse.addEventListener("click", () => browseTopic(name));
  change?.addEventListener("click", () => fillTopicChange(topic));
  remove.addEventListener("click", () => {
    confirmingDelete = name;
    refresh();
  });
  return el("div", { className: "actions" }, change ? [browse, change, remove] : [browse, remove]);
}

function groupActions(group, topic) {
  const details = el("button", { type: "button", className: "group-details", text: "Members and lag" });
  details.addEventListener("click", () => showGroup(group));
  const letters = el("button", { type: "button", className: "group-dlq", text: "Dead letters" });
  letters.addEventListener("click", () => {
    $("#dead-letters").scrollIntoView();
    showDeadLetters(group);
  });
  const reset = el("button", { type: "button", className: "reset-group", text: "Reset offsets" });
  reset.addEventListener("click", () => {
    $("#reset-group").value = group;
    $("#reset-topic").value = topic;
    $("#reset-form").scrollIntoView({ block: "center" });
    $("#reset-to").focus();
  });
  return el("div", { className: "actions" }, [details, letters, reset]);
}

/** A queue's produce rate as the broker measured it since an earlier look; nothing before that. */
function rateText(queue) {
  const rate = queue.produce_rate_per_s;
  if (rate === null || rate === undefined) return "";
  return `, ${rate >= 10 ? Math.round(rate) : rate.toFixed(1)}/s`;
}

function renderTopics(page) {
  updateRows($("#topics-table tbody"), page.topics, (topic) => topic.name, (topic) => el("tr", { "data-topic": topic.name }, [
    cell("topic", topic.name, "name"),
    cell("read / write queues", `${topic.read_queues} / ${topic.write_queues}`),
    cell("perm", `${topic.perm}${topic.order ? ", ordered" : ""}`),
    cell("messages", topic.messages === null ? "-" : formatNumber(topic.messages)),
    cell("queues", topic.queues.map((queue) =>
      el("span", { className: "queue", text: `#${queue.queue_id}: ${queue.min_offset}..${queue.max_offset}${rateText(queue)}` }))),
    cell("actions", topicActions(topic)),
  ]), searches.topics ? `no topic name contains ${searches.topics}` : "no topic yet");
  paging.topics.next = page.next_cursor ?? null;
  showPage("topics", page.total, page.topics.length);
}

function pushActions(push) {
  const button = el("button", { type: "button", className: push.paused ? "push-resume" : "push-pause", text: push.paused ? "Resume" : "Pause" });
  button.addEventListener("click", () => setPaused(push, !push.paused));
  return el("div", { className: "actions" }, [button]);
}

/** PUT the subscription back as it is, but paused or not (its secret is kept when left out). */
async function setPaused(push, paused) {
  const body = {
    topic: push.topic,
    url: push.url,
    ordered: push.ordered,
    max_in_flight: push.max_in_flight,
    batch: push.batch,
    timeout_ms: push.timeout_ms,
    max_reconsume_times: push.max_reconsume_times,
    format: push.format,
    paused,
  };
  if (push.filter) body.filter = push.filter;
  try {
    await api(`${paused ? "pause" : "resume"} the push subscription of ${push.group}`, (client) =>
      client.request("put", "/v1/groups/{group}/push", { path: { group: push.group }, body }));
  } catch (error) {
    showNotice(error.message);
  }
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

  updateRows($("#groups-table tbody"), data.groups, (group) => `${group.group}\0${group.topic}`, (group) => el("tr", { "data-group": group.group, "data-topic": group.topic }, [
    cell("group", group.group, "name"),
    cell("topic", group.topic),
    cell("subscribers", String(group.subscribers)),
    cell("lag", formatNumber(group.lag)),
    cell("lag per queue", group.queues.map((queue) => el("span", {
      className: "queue",
      text: `#${queue.queue_id}: lag ${queue.lag} (${queue.committed_offset ?? "-"} / ${queue.max_offset})`,
    }))),
    cell("actions", groupActions(group.group, group.topic)),
  ]), searches.groups ? `no group name contains ${searches.groups}` : "no consumer group has an offset yet");

  updateRows($("#push-table tbody"), data.push, (push) => push.group, (push) => el("tr", { "data-group": push.group }, [
    cell("group", push.group, "name"),
    cell("topic", push.topic),
    cell("endpoint", push.url),
    cell("state", push.paused ? "paused" : push.ordered ? "running, ordered" : "running", "whole"),
    cell("lag", formatNumber(push.state.lag ?? 0)),
    cell("in flight", String(push.state.in_flight ?? 0)),
    cell("delivered", formatNumber(push.state.delivered ?? 0)),
    cell("failed", formatNumber(push.state.failed ?? 0)),
    cell("dead letters", formatNumber(push.state.dead_lettered ?? 0)),
    cell("last error", push.state.last_error ? `${formatTime(push.state.last_error.at_ms)}: ${push.state.last_error.message}` : "-"),
    cell("actions", pushActions(push)),
  ]), "no push subscription");

  paging.groups.next = data.groups_next_cursor;
  showPage("groups", data.groups_matching ?? data.totals.groups, data.groups.length);

  $("#topic-names").replaceChildren(...data.topics.map((topic) => el("option", { value: topic.name })));

  const now = Date.now();
  samples.push({ t: now, stored: data.totals.stored, consumed: data.totals.consumed });
  while (samples.length > 2 && samples[1].t < now - RATE_WINDOW_MS) samples.shift();
  drawRates($("#rate-chart"), samples, RATE_WINDOW_MS, now);
}

async function renderClusters() {
  renderReplication();
  const note = $("#clusters-note");
  try {
    const data = await api("view the cluster", (client) => client.request("get", "/v1/clusters"));
    const rows = [];
    for (const cluster of data.clusters) {
      for (const broker of cluster.brokers) {
        rows.push(el("tr", {}, [
          cell("cluster", cluster.name),
          cell("broker", broker.broker_name),
          cell("id", String(broker.broker_id)),
          cell("address", broker.address),
          cell("alive", broker.alive ? "yes" : "no", broker.alive ? "" : "error"),
          cell("last heartbeat", formatTime(broker.last_heartbeat_ms)),
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
    // The console's own view (not in openapi.yaml): the client's request() calls any path.
    const query = {
      groups_cursor: paging.groups.cursors.at(-1) ?? undefined,
      groups_q: searches.groups || undefined,
    };
    // Topics a page at a time, searched on the broker: fast however many there are.
    const topicsQuery = { q: searches.topics || undefined, cursor: paging.topics.cursors.at(-1) ?? undefined };
    if (!access.admin) {
      // The overview and the search are admin requests: an other account sees the topic names.
      const page = await api("list topics", (client) => client.request("get", "/v1/topics", { query: { cursor: topicsQuery.cursor } }));
      if (seq !== refreshes) return;
      reachable(true);
      renderTopics({
        total: null,
        next_cursor: page.next_cursor,
        topics: page.topics.map((topic) => ({ ...topic, messages: null, queues: [] })),
      });
    } else {
      const [data, topics] = await Promise.all([
        api("view the broker overview", (client) => client.request("get", "/console/api/overview", { query })),
        api("list topics", (client) => client.request("get", "/v1/admin/topics", { query: topicsQuery })),
      ]);
      if (seq !== refreshes) return; // a newer refresh (a page turned meanwhile) answers instead
      reachable(true);
      renderOverview(data);
      renderTopics(topics);
    }
    applyAccess();
    refreshGroup();
    renderTransactions();
    renderDelays();
    document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes || 0) + 1);
    badge.textContent = "live";
    badge.className = "badge ok";
  } catch (error) {
    if (seq !== refreshes) return;
    if (error.status === 401) return; // the sign-in form is open
    reachable(!error.unreachable, error.message);
    badge.textContent = error.unreachable ? "unreachable" : `error: ${error.message}`;
    badge.className = "badge bad";
  }
}

// -- create and delete topics -------------------------------------------------------------------

async function createTopic(event) {
  event.preventDefault();
  const out = $("#create-topic-result");
  const name = $("#create-topic-name").value.trim();
  const queues = Number($("#create-topic-queues").value || 4);
  const perm = Number($("#create-topic-perm").value);
  const order = $("#create-topic-order").checked;
  try {
    await api(`create topic ${name}`, (client) => client.request("post", "/v1/topics", { body: { name, queues, perm, order } }));
    const how = [perm !== 6 ? `perm ${perm}` : "", order ? "ordered" : ""].filter(Boolean).join(", ");
    show(out, `created ${name} with ${queues} queues${how ? ` (${how})` : ""}`);
    $("#create-topic-name").value = "";
    refresh();
  } catch (error) {
    show(out, error.message, true);
  }
}

async function deleteTopic(name) {
  const out = $("#create-topic-result");
  confirmingDelete = null;
  try {
    await api(`delete topic ${name}`, (client) => client.deleteTopic(name));
    show(out, `deleted ${name}`);
  } catch (error) {
    show(out, error.message, true);
  }
  refresh();
}

// -- browse a topic's latest messages -----------------------------------------------------------

function browseTopic(name) {
  $("#browse-topic").value = name;
  $("#browse-queue").value = "";
  $("#messages").scrollIntoView();
  browse();
}

async function browse(event) {
  event?.preventDefault();
  const out = $("#browse-result");
  const state = $("#browse-state");
  const topic = $("#browse-topic").value.trim();
  const only = $("#browse-queue").value;
  try {
    const action = `read topic ${topic}`;
    const { queues } = await api(action, (client) => client.listQueues(topic));
    const chosen = queues.filter((queue) =>
      (only === "" || queue.queue_id === Number(only)) && queue.max_offset > queue.min_offset);
    const answers = [];
    // A few pulls at a time: a topic may have a thousand queues.
    for (let start = 0; start < chosen.length; start += BROWSE_PARALLEL) {
      answers.push(...await Promise.all(chosen.slice(start, start + BROWSE_PARALLEL).map((queue) => {
        const offset = Math.max(queue.min_offset, queue.max_offset - BROWSE_PER_QUEUE);
        return api(action, (client) => client.pull(topic, queue.queue_id, { offset, maxMessages: BROWSE_PER_QUEUE }));
      })));
    }
    const messages = answers.flatMap((answer) => answer.messages)
      .sort((a, b) => b.store_timestamp - a.store_timestamp || b.queue_offset - a.queue_offset)
      .slice(0, BROWSE_ROWS);
    out.replaceChildren(messageTable(messages, `no message in ${topic}`));
    show(state, `latest ${messages.length} of ${topic}, newest first`);
  } catch (error) {
    out.replaceChildren();
    show(state, error.message, true);
  }
}

// -- reset a group's offsets --------------------------------------------------------------------

function updateResetFields() {
  const time = $("#reset-time");
  time.hidden = $("#reset-to").value !== "time";
  time.required = !time.hidden;
  const list = $("#reset-list");
  list.hidden = $("#reset-to").value !== "offsets";
  list.required = !list.hidden;
  cancelReset();
}

// The group whose reset waits for a second press: its members are running.
let resetConfirmed = null;

function cancelReset() {
  resetConfirmed = null;
  $("#reset-warning").hidden = true;
  $("#reset-cancel").hidden = true;
  $("#reset-offsets").textContent = "Reset offsets";
}

/** "0=12 1=40" (or with commas): {queue_id: offset}. */
function parseOffsetList(text) {
  const offsets = new Map();
  for (const item of text.split(/[\s,]+/).filter(Boolean)) {
    const match = /^(\d+)[=:](\d+)$/.exec(item);
    if (!match) throw new ApiError(`an offset is queue=offset, e.g. 0=120, not ${JSON.stringify(item)}`);
    offsets.set(Number(match[1]), Number(match[2]));
  }
  if (!offsets.size) throw new ApiError("give at least one queue=offset");
  return offsets;
}

async function resetOffsets(event) {
  event.preventDefault();
  const out = $("#reset-result");
  const group = $("#reset-group").value.trim();
  const topic = $("#reset-topic").value.trim();
  const to = $("#reset-to").value;
  const action = `reset the offsets of ${group} on ${topic}`;
  try {
    const key = `${group}\0${topic}`;
    if (resetConfirmed !== key) {
      // RocketMQ's warning: a running member keeps its place in memory and commits over the reset.
      const members = await runningMembers(group);
      if (members.length) {
        resetConfirmed = key;
        const warning = $("#reset-warning");
        warning.textContent = `${members.length} member${members.length === 1 ? " is" : "s are"} running in ${group} ` +
          `(${members.join(", ")}). A running member keeps reading from where it is and may commit over the reset: ` +
          "stop the consumers first, or press “Reset anyway”.";
        warning.hidden = false;
        $("#reset-offsets").textContent = "Reset anyway";
        $("#reset-cancel").hidden = false;
        return;
      }
    }
    cancelReset();
    let { queues } = await api(action, (client) => client.listQueues(topic));
    let offsets;
    if (to === "offsets") {
      const wanted = parseOffsetList($("#reset-list").value);
      for (const id of wanted.keys()) {
        if (!queues.some((queue) => queue.queue_id === id)) throw new ApiError(`${topic} has no queue ${id}`);
      }
      queues = queues.filter((queue) => wanted.has(queue.queue_id));
      offsets = queues.map((queue) => wanted.get(queue.queue_id));
    } else if (to === "time") {
      const timestamp = new Date($("#reset-time").value).getTime(); // the input's value is local time
      if (Number.isNaN(timestamp)) throw new ApiError("choose a time to reset to");
      offsets = await Promise.all(queues.map(async (queue) => {
        const found = await api(action, (client) => client.request("get", "/v1/topics/{topic}/queues/{queue_id}/offset", {
          path: { topic, queue_id: queue.queue_id },
          query: { timestamp },
        }));
        // Retention may have removed the first message after the time meanwhile: start at what is left.
        return Math.min(queue.max_offset, Math.max(queue.min_offset, found.offset));
      }));
    } else {
      offsets = queues.map((queue) => (to === "first" ? queue.min_offset : queue.max_offset));
    }
    const commits = queues.map((queue, index) => ({ topic, queue_id: queue.queue_id, offset: offsets[index] }));
    const answer = await api(action, (client) => client.commitOffsets(group, commits));
    const where = answer.offsets.map((entry) => `#${entry.queue_id}: ${entry.committed_offset}`).join(", ");
    show(out, `${group} on ${topic} now reads from ${where}`);
    refresh();
    if (currentGroup() === group) refreshGroup();
  } catch (error) {
    show(out, error.message, true);
  }
}

// -- lookup ------------------------------------------------------------------------------------

function updateLookupFields() {
  const mode = $("#lookup-mode").value;
  $("#lookup-id").hidden = mode !== "id";
  $("#lookup-topic").hidden = mode === "id";
  $("#lookup-key").hidden = mode !== "key";
  $("#lookup-queue").hidden = mode !== "offset" && mode !== "time";
  $("#lookup-offset").hidden = mode !== "offset";
  $("#lookup-time").hidden = mode !== "time";
}

async function lookup(event) {
  event.preventDefault();
  const out = $("#lookup-result");
  const mode = $("#lookup-mode").value;
  const topic = $("#lookup-topic").value.trim();
  const action = "look messages up";
  try {
    let messages;
    if (mode === "id") {
      const id = $("#lookup-id").value.trim();
      messages = [await api(action, (client) => client.getMessage(id))];
    } else if (mode === "key") {
      const key = $("#lookup-key").value.trim();
      messages = (await api(action, (client) => client.lookupByKey(topic, key, { max: 20 }))).messages;
    } else if (mode === "time") {
      const queue = Number($("#lookup-queue").value || 0);
      const timestamp = new Date($("#lookup-time").value).getTime(); // local time
      if (Number.isNaN(timestamp)) throw new ApiError("choose a time");
      const found = await api(action, (client) => client.request("get", "/v1/topics/{topic}/queues/{queue_id}/offset", {
        path: { topic, queue_id: queue }, query: { timestamp },
      }));
      messages = (await api(action, (client) => client.pull(topic, queue, { offset: found.offset, maxMessages: 20 }))).messages;
    } else {
      const queue = Number($("#lookup-queue").value || 0);
      const offset = Number($("#lookup-offset").value || 0);
      const answer = await api(action, (client) => client.pull(topic, queue, { offset, maxMessages: 1 }));
      messages = answer.messages.filter((message) => message.queue_offset === offset);
    }
    out.replaceChildren(messageTable(messages));
  } catch (error) {
    out.replaceChildren(el("p", { className: "error", text: error.message }));
  }
}

// -- live tail ---------------------------------------------------------------------------------

let tailing = null; // the subscription shown

function tailState(text, bad = false) {
  show($("#tail-state"), text, bad);
}

function tailButtons(running) {
  $("#tail-start").disabled = running;
  $("#tail-stop").disabled = !running;
}

/** Why a subscription ended: its close code and the broker's reason, or the call that failed. */
function tailEnd(error) {
  if (error.closeCode === undefined) return error.message;
  const code = error.errorCode ? `${error.errorCode} ` : "";
  return `closed (${error.closeCode}): ${code}${error.message}`;
}

function startTail(event) {
  event.preventDefault();
  stopTail();
  const topic = $("#tail-topic").value.trim();
  const tags = $("#tail-tags").value.trim();
  const rows = $("#tail-rows");
  rows.replaceChildren();
  tailState("connecting");
  tailButtons(true);
  // From the end, without a group: nothing is acknowledged, and the client grants the credit back
  // as the rows are shown, so the broker never has more than TAIL_CREDIT in flight. A connection
  // lost is opened again and resumed after the last message shown.
  const subscription = tail(topic, {
    tags: tags || undefined,
    from: "last",
    credit: TAIL_CREDIT,
    onAssignment: (queues) => tailState(`tailing ${topic} (${queues.length} queues)`),
    onReconnect: ({ code }) => tailState(`reconnecting (closed with ${code})`, true),
    onMessage: (message) => {
      rows.prepend(messageRow(message));
      while (rows.children.length > TAIL_ROWS) rows.lastElementChild.remove();
    },
    onEnd: (error) => {
      if (tailing !== subscription) return;
      tailing = null;
      tailState(tailEnd(error), true);
      tailButtons(false);
    },
  });
  tailing = subscription;
}

function stopTail() {
  if (tailing) {
    const subscription = tailing;
    tailing = null;
    subscription.close();
    tailState("stopped");
  }
  tailButtons(false);
}

// -- produce -----------------------------------------------------------------------------------

function parseProperties(text) {
  const properties = {};
  for (const line of text.split("\n")) {
    if (!line.trim()) continue;
    const at = line.indexOf("=");
    if (at < 1) throw new ApiError(`a property is name=value, not ${JSON.stringify(line)}`);
    properties[line.slice(0, at).trim()] = line.slice(at + 1).trim();
  }
  return properties;
}

async function produce(event) {
  event.preventDefault();
  const out = $("#produce-result");
  const topic = $("#produce-topic").value.trim();
  try {
    const message = { body: $("#produce-body").value };
    const tags = $("#produce-tags").value.trim();
    const keys = $("#produce-keys").value.trim();
    const properties = parseProperties($("#produce-properties").value);
    if (tags) message.tags = tags;
    const delay = $("#produce-delay").value;
    if (delay) message.delay_level = Number(delay);
    if (keys) message.keys = keys.split(/\s+/);
    if (Object.keys(properties).length) message.properties = properties;
    const result = await api(`produce to ${topic}`, (client) => client.produceOne(topic, message));
    out.className = "";
    out.textContent = JSON.stringify(result, null, 2);
    refresh();
  } catch (error) {
    out.className = "error";
    out.textContent = error.message;
  }
}

// -- start -------------------------------------------------------------------------------------

$("#tail-box").append(el("table", { id: "tail-table", className: "messages cards-on-phone" }, [messageHead(), el("tbody", { id: "tail-rows" })]));
$("#signin-form").addEventListener("submit", signIn);
$("#sign-out").addEventListener("click", signOut);
$("#notice-close").addEventListener("click", () => {
  $("#notice").hidden = true;
  $("#notice-list").replaceChildren();
});
$("#create-topic-form").addEventListener("submit", createTopic);
$("#change-topic-form").addEventListener("submit", (event) => changeTopic(event, refresh));
$("#browse-form").addEventListener("submit", browse);
$("#reset-to").addEventListener("change", updateResetFields);
$("#reset-form").addEventListener("submit", resetOffsets);
$("#lookup-mode").addEventListener("change", updateLookupFields);
$("#lookup-form").addEventListener("submit", lookup);
$("#tail-form").addEventListener("submit", startTail);
$("#tail-stop").addEventListener("click", stopTail);
$("#produce-form").addEventListener("submit", produce);
$("#topics-search-form").addEventListener("submit", (event) => search("topics", event));
$("#groups-search-form").addEventListener("submit", (event) => search("groups", event));
$("#reset-cancel").addEventListener("click", cancelReset);
$("#group-close").addEventListener("click", closeGroup);
$("#group-dead-letters").addEventListener("click", () => {
  $("#dead-letters").scrollIntoView();
  showDeadLetters(currentGroup());
});
$("#group-reset").addEventListener("click", () => {
  $("#reset-group").value = currentGroup();
  $("#reset-form").scrollIntoView({ block: "center" });
  $("#reset-topic").focus();
});
$("#dlq-form").addEventListener("submit", (event) => {
  event.preventDefault();
  showDeadLetters($("#dlq-group").value.trim());
});
$("#dlq-resend-all").addEventListener("click", resendAll);
pressTwice($("#dlq-skip-all"), "Yes, skip every dead letter", skipAll);
$("#dlq-more").addEventListener("click", moreDeadLetters);
$("#tx-form").addEventListener("submit", (event) => {
  event.preventDefault();
  renderTransactions();
});
$("#promote").addEventListener("click", promoteClicked);
$("#promote-force").addEventListener("click", forceClicked);
for (const id of ["#promote", "#promote-force"]) {
  $(id).addEventListener("keydown", (event) => {
    if (event.key === "Escape") cancelPromote();
  });
}
$("#body-format").addEventListener("change", () => {
  setBodyFormat($("#body-format").value);
  if ($("#browse-topic").value.trim()) browse();
});
$("#produce-delay").append(...DELAY_LEVELS.split(" ").map((name, index) =>
  el("option", { value: String(index + 1), text: `delay ${name} (level ${index + 1})` })));
for (const name of Object.keys(paging)) {
  $(`#${name}-prev`).addEventListener("click", () => turnPage(name, false));
  $(`#${name}-next`).addEventListener("click", () => turnPage(name, true));
}
window.addEventListener("resize", () => drawRates($("#rate-chart"), samples, RATE_WINDOW_MS));
showAccount();
updateLookupFields();
updateResetFields();
drawRates($("#rate-chart"), samples, RATE_WINDOW_MS);
loadAccess().then(() => {
  refresh();
  renderClusters();
});
setInterval(refresh, REFRESH_MS);
setInterval(renderClusters, REFRESH_MS * 5);

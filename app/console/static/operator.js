// The operator's views: what the account may do, a group's members and lag, its dead letters and
// retries, open transactions, the delay levels, and this broker's replication and disk. Each calls
// the broker's HTTP API through api.js, so a script can do the same.
import { api } from "./api.js";
import { bodyView, cell, el, formatTime } from "./messages.js";
import { renderMachinery, renderPopInFlight } from "./machinery.js";
import { formatAge, formatNumber, rows, say } from "./view.js";

const $ = (selector) => document.querySelector(selector);
const DLQ_PAGE = 50;
const RETRY_ROWS = 50;


// -- access: what this account may do ----------------------------------------------------------

/** `{acl, account, admin}` as the broker answers GET /v1/access; admin until it has answered. */
export const access = { acl: false, account: null, admin: true, known: false };

/** Ask the broker what the signed-in account may do; marks the page so that what it may not do is
 * hidden (.admin-only) or disabled (.admin-write). The broker refuses such a request anyway. */
export async function loadAccess() {
  try {
    Object.assign(access, await api("see what this account may do", (client) => client.request("get", "/v1/access")), { known: true });
  } catch (error) {
    if (error.status === 401) return;
    Object.assign(access, { known: false, admin: true });
  }
  applyAccess();
}

export function applyAccess(root = document) {
  document.body.dataset.admin = String(access.admin);
  for (const node of root.querySelectorAll(".admin-write")) {
    node.disabled = !access.admin;
    if (!access.admin) node.title = "needs an admin account";
  }
}

// -- a group: members, assignment, lag, consumer rate -------------------------------------------

let shownGroup = null;
let lastCommitted = null; // {t, total} of the previous look, for the consumer rate

function subscriptionText(subscriptions) {
  return Object.entries(subscriptions).map(([topic, filter]) =>
    `${topic}: ${typeof filter === "string" ? filter : `${filter.type} ${filter.expression}`}`).join("; ");
}

export async function showGroup(group, { focus = true } = {}) {
  const panel = $("#group-detail");
  const state = $("#group-detail-state");
  if (shownGroup !== group) lastCommitted = null;
  shownGroup = group;
  panel.hidden = false;
  $("#group-detail-name").textContent = group;
  if (focus) panel.focus();
  try {
    const view = await api(`view group ${group}`, (client) => client.request("get", "/v1/groups/{group}", { path: { group } }));
    if (shownGroup !== group) return;
    const owner = new Map();
    for (const member of view.members) {
      for (const queue of member.assignments) owner.set(`${queue.topic}\0${queue.queue_id}`, member.client_id);
    }
    const total = view.offsets.reduce((sum, queue) => sum + queue.lag, 0);
    const committed = view.offsets.reduce((sum, queue) => sum + (queue.committed_offset ?? 0), 0);
    const now = Date.now();
    let rate = "-";
    if (lastCommitted && now > lastCommitted.t) {
      rate = (Math.max(0, committed - lastCommitted.total) * 1000 / (now - lastCommitted.t)).toFixed(1);
    }
    lastCommitted = { t: now, total: committed };
    $("#group-generation").textContent = view.generation ?? "-";
    $("#group-member-count").textContent = String(view.members.length);
    $("#group-mode").textContent = view.consume_mode ?? "-";
    $("#group-lag").textContent = formatNumber(total);
    $("#group-tps").textContent = rate;
    $("#group-max-reconsume").textContent = String(view.config.max_reconsume_times);
    rows($("#group-members tbody"), view.members.map((member) => el("tr", { "data-client-id": member.client_id }, [
      cell("client id", member.client_id, "name"),
      cell("last heartbeat", `${formatAge(member.last_heartbeat_ms_ago)} ago`),
      cell("subscription", subscriptionText(member.subscriptions)),
      cell("queues assigned", member.assignments.map((queue) =>
        el("span", { className: "queue", text: `${queue.topic}#${queue.queue_id}` }))),
      cell("locks held", member.locks.length ? member.locks.map((queue) =>
        el("span", { className: "queue", text: `${queue.topic}#${queue.queue_id}` })) : "-"),
    ])), "no live member: nothing is consuming");
    rows($("#group-queues tbody"), view.offsets.map((queue) => el("tr", { "data-topic": queue.topic, "data-queue": String(queue.queue_id) }, [
      cell("topic", queue.topic),
      cell("queue", String(queue.queue_id)),
      cell("member", owner.get(`${queue.topic}\0${queue.queue_id}`) ?? "-"),
      cell("committed", queue.committed_offset === null ? "-" : String(queue.committed_offset)),
      cell("max", String(queue.max_offset)),
      cell("lag", formatNumber(queue.lag), queue.lag ? "lag" : ""),
    ])), "no committed offset and no subscription");
    say(state, `as of ${formatTime(now)}`);
  } catch (error) {
    if (shownGroup === group) say(state, error.message, true);
  }
  if (shownGroup === group) renderPopInFlight(group, access.admin);
}

export function refreshGroup() {
  if (shownGroup && !$("#group-detail").hidden) showGroup(shownGroup, { focus: false });
}

export function closeGroup() {
  shownGroup = null;
  $("#group-detail").hidden = true;
}

export function currentGroup() {
  return shownGroup;
}

/** The live members of `group` (none when it has no members or is unknown). */
export async function runningMembers(group) {
  try {
    const view = await api(`view group ${group}`, (client) => client.request("get", "/v1/groups/{group}", { path: { group } }));
    return view.members.map((member) => member.client_id);
  } catch (error) {
    if (error.status === 404) return [];
    throw error;
  }
}

// -- dead letters and retries ------------------------------------------------------------------

let dlq = { group: null, next: 0, shown: [], mark: 0 };

/** `button` asks to be pressed twice: the first press shows `question`, the second does
 * `action()`; Escape gives up. For what the broker cannot take back. */
export function pressTwice(button, question, action) {
  const disarm = () => {
    if (button.dataset.armed !== "true") return;
    button.dataset.armed = "false";
    button.textContent = button.dataset.text;
  };
  button.addEventListener("click", () => {
    if (button.dataset.armed !== "true") {
      button.dataset.armed = "true";
      button.dataset.text = button.textContent;
      button.textContent = question;
      return;
    }
    disarm();
    action();
  });
  button.addEventListener("keydown", (event) => {
    if (event.key === "Escape") disarm();
  });
}
export const MAX_RESEND = 1000; // the broker's cap on one resend of all (app.broker.dead_letter.MAX_RESEND)

function retryTopic(group) {
  return `%RETRY%${group}`;
}

function deadLetterRow(letter, group) {
  const resend = el("button", { type: "button", className: "resend admin-write", text: "Resend" });
  resend.addEventListener("click", () => resendLetters(group, [letter.msg_id]));
  const actions = [resend];
  const passed = letter.queue_offset < dlq.mark;
  if (passed) {
    actions.push(el("span", { className: "muted passed", text: "passed (resent or skipped)" }));
  } else {
    const skip = el("button", { type: "button", className: "skip admin-only", text: "Skip through here" });
    pressTwice(skip, `Yes, skip offsets ..${letter.queue_offset}`, () => skipLetters(group, letter.queue_offset));
    actions.push(skip);
  }
  const message = letter.message;
  return el("tr", { "data-msg-id": letter.msg_id, className: passed ? "passed" : "" }, [
    cell("offset", String(letter.queue_offset)),
    cell("original topic", letter.original_topic),
    cell("reconsume times", String(letter.reconsume_times)),
    cell("stored", formatTime(letter.store_timestamp)),
    cell("tags / keys", [message.tags || "", " ", (message.keys || []).join(" ")].join("").trim() || "-"),
    cell("body", bodyView(message), "body-cell"),
    cell("msg id", letter.msg_id, "id msg-id"),
    cell("actions", el("div", { className: "actions" }, actions)),
  ]);
}

export async function showDeadLetters(group, { more = false } = {}) {
  const state = $("#dlq-state");
  if (!more || dlq.group !== group) dlq = { group, next: 0, shown: [], mark: 0 };
  $("#dlq-group").value = group;
  try {
    const page = await api(`read the dead letters of ${group}`, (client) => client.request("get", "/v1/groups/{group}/dlq", {
      path: { group }, query: { offset: dlq.next, limit: DLQ_PAGE },
    }));
    if (dlq.group !== group) return;
    dlq.shown.push(...page.dead_letters);
    dlq.next = page.next_offset;
    dlq.mark = page.resent_until;
    rows($("#dlq-table tbody"), dlq.shown.map((letter) => deadLetterRow(letter, group)), `no dead letter in %DLQ%${group}`);
    applyAccess($("#dlq-table"));
    $("#dlq-more").hidden = page.dead_letters.length < DLQ_PAGE;
    $("#dlq-resend-all").disabled = !access.admin;
    $("#dlq-skip-all").disabled = !access.admin;
    const cap = $("#dlq-cap");
    cap.hidden = false;
    cap.textContent = `Dead letters below offset ${page.resent_until} were resent by an earlier "resend all" or skipped. ` +
      `One "resend all" sends at most ${formatNumber(MAX_RESEND)}; press it again for the rest.`;
    say(state, `${dlq.shown.length} dead letter${dlq.shown.length === 1 ? "" : "s"} of ${group} shown`);
  } catch (error) {
    say(state, error.message, true);
  }
  showRetries(group);
}

async function showRetries(group) {
  const topic = retryTopic(group);
  $("#retry-topic-name").textContent = topic;
  const tbody = $("#retry-table tbody");
  try {
    const { queues } = await api(`read ${topic}`, (client) => client.listQueues(topic));
    const answers = await Promise.all(queues.filter((queue) => queue.max_offset > queue.min_offset).map((queue) =>
      api(`read ${topic}`, (client) => client.pull(topic, queue.queue_id, {
        offset: Math.max(queue.min_offset, queue.max_offset - RETRY_ROWS), maxMessages: RETRY_ROWS,
      }))));
    const messages = answers.flatMap((answer) => answer.messages).sort((a, b) => b.store_timestamp - a.store_timestamp);
    rows(tbody, messages.map((message) => el("tr", { "data-msg-id": message.msg_id }, [
      cell("stored", formatTime(message.store_timestamp)),
      cell("original topic", message.properties?.RETRY_TOPIC ?? "-"),
      cell("reconsume times", String(message.reconsume_times ?? message.properties?.RECONSUME_TIME ?? "-")),
      cell("due", message.deliver_at_ms ? formatTime(message.deliver_at_ms) : "when its group pulls"),
      cell("body", bodyView(message), "body-cell"),
      cell("msg id", message.msg_id, "id msg-id"),
    ])), `nothing waits in ${topic}`);
  } catch (error) {
    rows(tbody, [], error.status === 404 ? `nothing waits in ${topic}` : error.message);
  }
}

async function resendLetters(group, ids) {
  const state = $("#dlq-state");
  const body = ids ? { msg_ids: ids } : { all: true };
  try {
    const answer = await api(`resend dead letters of ${group}`, (client) => client.request("post", "/v1/groups/{group}/dlq/resend", {
      path: { group }, body,
    }));
    const where = [...new Set(answer.resent.map((sent) => sent.topic))].join(", ");
    say(state, answer.resent.length
      ? `resent ${answer.resent.length} to ${where}`
      : "nothing to resend: every dead letter was resent already");
    await showDeadLetters(group);
    say(state, answer.resent.length ? `resent ${answer.resent.length} to ${where}` : "nothing to resend: every dead letter was resent already");
  } catch (error) {
    say(state, error.message, true);
  }
}

/** Pass over the dead letters through `offset` (null: all), then show the list again. */
async function skipLetters(group, offset) {
  const state = $("#dlq-state");
  const body = offset === null ? { all: true } : { through_offset: offset };
  try {
    const answer = await api(`skip dead letters of ${group}`, (client) => client.request("post", "/v1/groups/{group}/dlq/skip", {
      path: { group }, body,
    }));
    await showDeadLetters(group);
    say(state, answer.skipped
      ? `skipped ${answer.skipped}: dead letters below offset ${answer.resent_until} are passed over`
      : "nothing to skip: every dead letter was passed over already");
  } catch (error) {
    say(state, error.message, true);
  }
}

export function skipAll() {
  if (dlq.group) skipLetters(dlq.group, null);
}

export function resendAll() {
  if (dlq.group) resendLetters(dlq.group, null);
}

export function moreDeadLetters() {
  if (dlq.group) showDeadLetters(dlq.group, { more: true });
}

// -- transactions ------------------------------------------------------------------------------

export async function renderTransactions() {
  const state = $("#tx-state");
  const group = $("#tx-group").value.trim();
  if (!access.admin) {
    rows($("#tx-table tbody"), [], "listing every open transaction needs an admin account");
    return;
  }
  try {
    const query = group ? { producer_group: group } : {};
    const answer = await api("list open transactions", (client) => client.request("get", "/v1/admin/transactions", { query }));
    rows($("#tx-table tbody"), answer.transactions.map((tx) => {
      const commit = el("button", { type: "button", className: "tx-commit", text: "Commit" });
      const rollback = el("button", { type: "button", className: "tx-rollback danger", text: "Roll back" });
      commit.addEventListener("click", () => endTransaction(tx.transaction_id, "commit"));
      rollback.addEventListener("click", () => endTransaction(tx.transaction_id, "rollback"));
      return el("tr", { "data-transaction": tx.transaction_id }, [
        cell("transaction id", tx.transaction_id, "id"),
        cell("producer group", tx.producer_group),
        cell("topic", tx.topic),
        cell("age", formatAge(tx.age_ms)),
        cell("checks", String(tx.check_times)),
        cell("check endpoint", tx.check_url ?? "none registered"),
        cell("actions", el("div", { className: "actions" }, [commit, rollback])),
      ]);
    }), "no open transaction");
    say(state, `${answer.total} open${group ? ` in ${group}` : ""}`);
  } catch (error) {
    say(state, error.message, true);
  }
}

async function endTransaction(id, how) {
  const state = $("#tx-state");
  try {
    const path = how === "commit" ? "/v1/transactions/{transaction_id}/commit" : "/v1/transactions/{transaction_id}/rollback";
    const answer = await api(`${how === "commit" ? "commit" : "roll back"} transaction ${id}`, (client) =>
      client.request("post", path, { path: { transaction_id: id } }));
    await renderTransactions();
    say(state, `${id}: ${answer.state ?? (how === "commit" ? "committed" : "rolled back")}`);
  } catch (error) {
    say(state, error.message, true);
  }
}

// -- delay levels ------------------------------------------------------------------------------

export async function renderDelays() {
  const state = $("#delays-state");
  if (!access.admin) {
    rows($("#delays-table tbody"), [], "the delay levels need an admin account");
    return;
  }
  try {
    const view = await api("view the delay levels", (client) => client.request("get", "/v1/admin/delays"));
    rows($("#delays-table tbody"), view.levels.map((level) => el("tr", { "data-level": String(level.level), className: level.pending ? "" : "idle" }, [
      cell("level", String(level.level)),
      cell("delay", level.delay),
      cell("pending", formatNumber(level.pending)),
      cell("next due", level.next_due_ms ? `${formatTime(level.next_due_ms)} (in ${formatAge(level.next_due_ms - view.now_ms)})` : "-"),
    ])));
    const pending = view.levels.reduce((sum, level) => sum + level.pending, 0);
    const busy = view.levels.filter((level) => level.pending).length;
    say(state, `${formatNumber(pending)} delayed message${pending === 1 ? "" : "s"} pending in ${busy} level${busy === 1 ? "" : "s"}`);
    const timer = view.timer;
    $("#timer-next-hour").textContent = formatNumber(timer.due_next_hour);
    $("#timer-later").textContent = formatNumber(timer.due_later);
    $("#timer-next").textContent = timer.next_due_ms
      ? `${formatTime(timer.next_due_ms)} (in ${formatAge(timer.next_due_ms - view.now_ms)})` : "-";
    $("#timer-note").textContent = timer.complete ? "" : "counted over the latest timer messages only";
  } catch (error) {
    say(state, error.message, true);
  }
}

// -- replication and disk ----------------------------------------------------------------------

function masterLease(ha) {
  if (!ha.master_alive) return "its master is not alive: a promotion goes through";
  if (ha.master_lease_left_ms === null || ha.master_lease_left_ms === undefined) {
    return "its master is alive (connected): a promotion is refused unless forced";
  }
  return `its master is alive (lease ends in ${formatAge(ha.master_lease_left_ms)} unless renewed): a promotion is refused unless forced`;
}

export async function renderReplication() {
  const note = $("#ha-note");
  if (!access.admin) {
    note.textContent = "replication and disk need an admin account";
    return;
  }
  try {
    const [ha, disk] = await Promise.all([
      api("view replication", (client) => client.request("get", "/v1/admin/ha")),
      api("view the disk", (client) => client.request("get", "/v1/admin/disk")),
    ]);
    $("#ha-role").textContent = ha.role;
    $("#ha-epoch").textContent = String(ha.epoch);
    $("#ha-max").textContent = formatNumber(ha.commitlog_max_offset);
    $("#ha-confirmed").textContent = formatNumber(ha.confirmed_offset);
    $("#disk-used").textContent = `${disk.used_percent.toFixed(1)} %`;
    $("#disk-writable").textContent = disk.writable ? "accepted" : "refused (disk full)";
    $("#disk-writable").classList.toggle("error", !disk.writable);
    $("#disk-used").title = `writes are refused above ${disk.refuse_writes_percent} % and accepted again at ${disk.accept_writes_percent} %`;
    $("#ha-master").textContent = ha.role === "SLAVE"
      ? `slave of ${ha.master_url} (${ha.connected ? "connected" : "not connected"}), broker ${ha.broker_name} id ${ha.broker_id}; ${masterLease(ha)}`
      : `master of ${ha.broker_name} (id ${ha.broker_id}); writes refused above ${disk.refuse_writes_percent} % disk use`;
    rows($("#slaves-table tbody"), ha.slaves.map((slave) => el("tr", { "data-slave": String(slave.broker_id) }, [
      cell("slave", slave.url),
      cell("id", String(slave.broker_id)),
      cell("acked offset", formatNumber(slave.acked_offset)),
      cell("lag (bytes)", formatNumber(slave.lag_bytes), slave.lag_bytes ? "lag" : ""),
      cell("lag (time)", slave.lag_ms === null || slave.lag_ms === undefined ? "-" : `${(slave.lag_ms / 1000).toFixed(1)} s`, slave.lag_ms ? "lag" : ""),
      cell("in sync", slave.in_sync ? "yes" : "no", slave.in_sync ? "" : "error"),
    ])), ha.role === "SLAVE" ? "a slave has no slaves" : "no slave connected");
    note.textContent = "";
    renderMachinery(access.admin);
  } catch (error) {
    note.textContent = `replication view unavailable: ${error.message}`;
  }
}

const MASTER_ALIVE = 40941;
// The two promote buttons: each asks to be pressed twice; the forced one shows once a promotion was
// refused because the master is alive.
const PROMOTE_BUTTONS = {
  promote: {
    id: "#promote",
    text: "Promote this broker to master",
    question: "Yes, promote: make this broker the master",
    warning: "A promotion starts a new epoch; the old master's writes after it are cut. Press again to promote, Escape to cancel.",
    force: false,
  },
  force: {
    id: "#promote-force",
    text: "Force the promotion while the master is alive",
    question: "Yes, force it: the live master is fenced and steps down",
    warning: "A forced promotion does not wait for the master's lease: what the master takes until it sees the new epoch is cut. Press again to force, Escape to cancel.",
    force: true,
  },
};
const confirming = { promote: false, force: false };

function pressed(kind) {
  const button = PROMOTE_BUTTONS[kind];
  if (!confirming[kind]) {
    confirming[kind] = true;
    $(button.id).textContent = button.question;
    say($("#promote-result"), button.warning);
    return;
  }
  confirming[kind] = false;
  $(button.id).textContent = button.text;
  promote(button.force);
}

export function promoteClicked() {
  pressed("promote");
}

export function forceClicked() {
  pressed("force");
}

export function cancelPromote() {
  if (!confirming.promote && !confirming.force) return;
  for (const [kind, button] of Object.entries(PROMOTE_BUTTONS)) {
    confirming[kind] = false;
    $(button.id).textContent = button.text;
  }
  say($("#promote-result"), "promotion cancelled");
}

async function promote(force) {
  const out = $("#promote-result");
  const forceButton = $("#promote-force");
  try {
    const query = force ? { force: "true" } : undefined;
    const ha = await api("promote this broker", (client) => client.request("post", "/v1/admin/ha/promote", { query }));
    forceButton.hidden = true;
    say(out, `promoted: ${ha.role} in epoch ${ha.epoch}`);
  } catch (error) {
    forceButton.hidden = error.body?.error_code !== MASTER_ALIVE;
    say(out, `refused: ${error.message}`, true);
  }
  renderReplication();
}

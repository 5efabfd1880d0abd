// The broker's machinery, read from its admin endpoints: a group's pop messages in flight
// (GET /v1/admin/groups/{group}/pop), the route registry's health (GET /v1/admin/registry) and the
// store's files (GET /v1/admin/store). Admin requests: an account that is not an admin sees a line
// saying so, and the broker would refuse it anyway.
import { api } from "./api.js";
import { cell, el, formatTime } from "./messages.js";
import { formatAge, formatNumber, plural, rows, say } from "./view.js";

const $ = (selector) => document.querySelector(selector);
const SEGMENTS = 10;

export async function renderPopInFlight(group, admin) {
  const tbody = $("#group-pop tbody");
  if (!admin) {
    rows(tbody, [], "pop messages in flight need an admin account");
    return;
  }
  try {
    const view = await api(`view the pop messages of ${group}`, (client) =>
      client.request("get", "/v1/admin/groups/{group}/pop", { path: { group } }));
    $("#group-pop-total").textContent = formatNumber(view.in_flight);
    rows(tbody, view.queues.map((queue) => el("tr", { "data-topic": queue.topic, "data-queue": String(queue.queue_id) }, [
      cell("topic", queue.topic),
      cell("queue", String(queue.queue_id)),
      cell("in flight", formatNumber(queue.in_flight)),
      cell("invisible", formatNumber(queue.invisible)),
      cell("visible again", formatNumber(queue.visible_again), queue.visible_again ? "lag" : ""),
      cell("next deadline", queue.next_deadline_ms === null ? "-"
        : `${formatTime(queue.next_deadline_ms)} (in ${formatAge(queue.next_deadline_ms - view.now_ms)})`),
    ])), "no pop message in flight");
  } catch (error) {
    rows(tbody, [], error.message);
  }
}

function renderRegistry(health) {
  if (!health.configured) {
    $("#registry-state").textContent = "none";
    $("#registry-heartbeat").textContent = "-";
    return;
  }
  const state = $("#registry-state");
  state.textContent = `${health.kind}, ${health.reachable ? "reachable" : "unreachable"}`;
  state.classList.toggle("error", !health.reachable);
  $("#registry-heartbeat").textContent = health.last_heartbeat_ms ? `${formatAge(Date.now() - health.last_heartbeat_ms)} ago` : "never";
  $("#registry-heartbeat").title = health.last_heartbeat_ms ? formatTime(health.last_heartbeat_ms) : "";
  const problems = [];
  if (health.last_error) problems.push(`the registry does not answer: ${health.last_error}`);
  if (!health.published) problems.push("a topic change waits for the next heartbeat to reach the registry");
  say($("#registry-note"), problems.join("; ") || `this broker registers every ${health.heartbeat_interval_s} s`, problems.length > 0);
}

function renderStoreFiles(files) {
  const log = files.commitlog;
  const queues = files.consume_queues;
  $("#store-summary").textContent = `CommitLog: ${plural(log.segments, "segment")}, ` +
    `${formatNumber(log.bytes)} bytes, offsets ${formatNumber(log.min_offset)}..${formatNumber(log.max_offset)}; ` +
    `ConsumeQueues: ${plural(queues.queues, "queue")} in ${plural(queues.files, "file")}, ${formatNumber(queues.bytes)} bytes; ` +
    `index: ${plural(files.index.files, "file")}, ${formatNumber(files.index.bytes)} bytes` +
    (log.segments > log.files.length ? `; the latest ${log.files.length} segments below` : "");
  rows($("#store-table tbody"), log.files.map((segment) => el("tr", { "data-segment": segment.name }, [
    cell("segment", segment.name, "id"),
    cell("from offset", formatNumber(segment.from_offset)),
    cell("size (bytes)", formatNumber(segment.size_bytes)),
    cell("written (bytes)", formatNumber(segment.written_bytes)),
  ])), "no CommitLog segment yet");
}

/** The registry's health and the store's files, on the cluster page. */
export async function renderMachinery(admin) {
  if (!admin) return;
  try {
    const [health, files] = await Promise.all([
      api("view the route registry", (client) => client.request("get", "/v1/admin/registry")),
      api("view the store's files", (client) => client.request("get", "/v1/admin/store", { query: { segments: SEGMENTS } })),
    ]);
    renderRegistry(health);
    renderStoreFiles(files);
  } catch (error) {
    say($("#registry-note"), `registry and store view unavailable: ${error.message}`, true);
  }
}

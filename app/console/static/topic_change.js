// Changing a topic in place (PUT /v1/topics/{topic}): its read and write queue numbers, permission
// and order flag. The broker checks every value (read queues never fewer than write queues) and says
// why it refuses; the form only fills in the topic's current values.
import { api } from "./api.js";
import { say } from "./view.js";

const $ = (selector) => document.querySelector(selector);

/** Fill the form with `topic` as the topics list shows it, and move to it. */
export function fillTopicChange(topic) {
  $("#change-topic-name").value = topic.name;
  $("#change-topic-read").value = String(topic.read_queues);
  $("#change-topic-write").value = String(topic.write_queues);
  $("#change-topic-perm").value = String(topic.perm);
  $("#change-topic-order").checked = topic.order;
  say($("#change-topic-result"), `${topic.name}: ${topic.read_queues} read / ${topic.write_queues} write queues, perm ${topic.perm}`);
  $("#change-topic-form").scrollIntoView({ block: "center" });
  $("#change-topic-read").focus();
}

/** Submit the form; `done()` redraws the topics once the broker has taken the change. */
export async function changeTopic(event, done) {
  event.preventDefault();
  const out = $("#change-topic-result");
  const name = $("#change-topic-name").value.trim();
  const body = {
    read_queues: Number($("#change-topic-read").value),
    write_queues: Number($("#change-topic-write").value),
    perm: Number($("#change-topic-perm").value),
    order: $("#change-topic-order").checked,
  };
  try {
    const topic = await api(`change topic ${name}`, (client) =>
      client.request("put", "/v1/topics/{topic}", { path: { topic: name }, body }));
    say(out, `changed ${topic.name}: ${topic.read_queues} read / ${topic.write_queues} write queues, perm ${topic.perm}${topic.order ? ", ordered" : ""}`);
    done();
  } catch (error) {
    say(out, `refused: ${error.message}`, true);
  }
}

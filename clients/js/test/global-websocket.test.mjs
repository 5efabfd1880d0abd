// Without a WebSocket option: the global WebSocket (undici's) in a node that has one.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { subscribe } from "../dist/index.js";
import { sharedBroker } from "./helpers/broker.mjs";
import { unique } from "./helpers/util.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const major = Number(process.versions.node.split(".")[0]);
const flags = major >= 22 ? [] : ["--experimental-websocket"];
const skip = major < 20 ? "needs Node 20 or newer for a global WebSocket" : false;

let broker;
before(async () => {
  broker = await sharedBroker();
});
after(async () => {
  await broker.release();
});

test("the global WebSocket: produce and subscribe (JSON and binary)", { skip }, () => {
  const topic = unique("global-ws");
  const run = spawnSync(process.execPath, [...flags, "--no-warnings", join(here, "fixtures", "global-websocket.mjs")], {
    env: { ...process.env, WHARF_TEST_URL: broker.url, WHARF_TEST_TOPIC: topic },
    encoding: "utf8",
    timeout: 60000,
  });
  assert.equal(run.status, 0, run.stderr);
  const out = JSON.parse(run.stdout.trim().split("\n").at(-1));
  assert.equal(out.websocket, "function");
  assert.deepEqual(out.results, Array.from({ length: 100 }, (_, i) => [i % 2, Math.floor(i / 2)]));
  for (const format of ["json", "binary"]) {
    const got = out[format];
    assert.equal(got.length, 100);
    for (const queue of [0, 1]) {
      const mine = got.filter(([q]) => q === queue);
      assert.deepEqual(mine.map(([, offset]) => offset), Array.from({ length: 50 }, (_, i) => i));
      for (const [, offset, body] of mine) assert.equal(body, `g-${offset * 2 + queue}`);
    }
  }
});

test("no WebSocket at all: a TypeError that says what to pass", { skip: typeof globalThis.WebSocket === "function" }, () => {
  assert.throws(() => subscribe({ url: broker.url, topic: "t" }), /pass options\.WebSocket/);
});

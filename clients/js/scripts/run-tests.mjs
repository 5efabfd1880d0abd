// `npm test`: start one broker for the test files (each may start more of its own), run them with
// node's test runner, then stop the broker and remove its store, whatever the outcome.
import { spawn } from "node:child_process";
import { readdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Broker } from "../test/helpers/broker.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const only = process.argv.slice(2);
const files = only.length
  ? only
  : readdirSync(join(root, "test"))
      .filter((name) => name.endsWith(".test.mjs"))
      .sort()
      .map((name) => join("test", name));

const started = Date.now();
const broker = await Broker.start();
console.log(`broker ready at ${broker.url} in ${Date.now() - started} ms`);
let code = 1;
try {
  // A test that leaves a socket open must not hold the run: force the exit where node can.
  const [major, minor] = process.versions.node.split(".").map(Number);
  const forceExit = major > 20 || (major === 20 && minor >= 14) ? ["--test-force-exit"] : [];
  const child = spawn(process.execPath, ["--test", "--test-reporter=spec", ...forceExit, ...files], {
    cwd: root,
    stdio: "inherit",
    env: { ...process.env, WHARF_TEST_URL: broker.url },
  });
  const forward = (signal) => child.kill(signal);
  process.on("SIGINT", forward);
  process.on("SIGTERM", forward);
  code = await new Promise((ok) => child.once("exit", (exitCode, signal) => ok(exitCode ?? (signal ? 1 : 0))));
} finally {
  if (code !== 0) console.error(`broker log (${broker.logPath}):\n${broker.log().slice(-4000)}`);
  await broker.dispose();
}
process.exit(code);

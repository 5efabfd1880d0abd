// The type test as part of `npm test`: scripts/typecheck-negative.mjs (also `npm run typecheck:negative`).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

test("tsc --strict refuses test/types/wrong-call.ts line by line and accepts right-call.ts", () => {
  const run = spawnSync(process.execPath, [join(root, "scripts", "typecheck-negative.mjs")], { cwd: root, encoding: "utf8" });
  assert.equal(run.status, 0, run.stdout + run.stderr);
  assert.match(run.stdout, /wrong calls refused, the right calls accepted/);
});

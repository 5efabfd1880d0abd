// The type test: test/types/right-call.ts must pass `tsc --strict --noEmit`, and
// test/types/wrong-call.ts must fail it, with an error on every line marked `// wrong` and on no
// other line (so each wrong call is refused for itself). Exit status 0 when both hold.
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
const flags = [
  "--strict",
  "--noEmit",
  "--target", "ES2022",
  "--module", "ESNext",
  "--moduleResolution", "bundler",
  "--lib", "ES2022,DOM",
  "--skipLibCheck",
  "--pretty", "false",
];

function check(file) {
  const run = spawnSync(process.execPath, [tsc, ...flags, file], { cwd: root, encoding: "utf8" });
  const errors = new Map(); // line -> messages
  for (const match of run.stdout.matchAll(/^(.+?)\((\d+),(\d+)\): error (TS\d+: .*)$/gm)) {
    if (!match[1].endsWith(file.split("/").pop())) continue;
    const line = Number(match[2]);
    errors.set(line, [...(errors.get(line) ?? []), match[4]]);
  }
  return { status: run.status, errors, output: run.stdout + run.stderr };
}

let failed = false;
const fail = (message) => {
  failed = true;
  console.error(`not ok - ${message}`);
};

const right = check("test/types/right-call.ts");
if (right.status === 0) console.log("ok - test/types/right-call.ts type-checks (tsc exit 0)");
else fail(`test/types/right-call.ts should type-check, tsc exited ${right.status}:\n${right.output}`);

const wrongFile = "test/types/wrong-call.ts";
const wrong = check(wrongFile);
if (wrong.status !== 0) console.log(`ok - ${wrongFile} is refused (tsc exit ${wrong.status})`);
else fail(`${wrongFile} should fail to type-check, tsc exited 0`);
const marked = readFileSync(join(root, wrongFile), "utf8")
  .split("\n")
  .map((text, index) => ({ text, line: index + 1 }))
  .filter(({ text }) => /\/\/ wrong\s*$/.test(text));
for (const { text, line } of marked) {
  const found = wrong.errors.get(line);
  if (found) console.log(`ok - line ${line} refused: ${found[0].slice(0, 110)}`);
  else fail(`line ${line} should be refused: ${text.trim()}`);
}
for (const [line, messages] of wrong.errors) {
  if (!marked.some((entry) => entry.line === line)) fail(`unexpected error on line ${line}: ${messages.join("; ")}`);
}
if (marked.length < 10) fail(`only ${marked.length} wrong calls are marked`);
console.log(failed ? "type test: FAILED" : `type test: ${marked.length} wrong calls refused, the right calls accepted`);
process.exit(failed ? 1 : 0);

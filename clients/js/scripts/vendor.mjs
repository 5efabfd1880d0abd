// The built module as the broker's console loads it: dist/*.js copied into the Python package
// (app/console/static/vendor/wharf-client/), which is built without npm, so the copy is committed.
// `npm run build` runs this; CI builds again and fails when the committed copy differs.
import { mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const dist = join(root, "dist");
const target = join(root, "..", "..", "app", "console", "static", "vendor", "wharf-client");
const { name, version } = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
const header = `// ${name} ${version}: clients/js/dist/%s, copied by clients/js/scripts/vendor.mjs (npm run build). Do not edit.\n`;

// The modules index.js imports, and theirs: a module of types alone (types.js) is imported by
// none once tsc has dropped the type imports, so the browser would never load it.
const modules = [];
for (const queue = ["index.js"]; queue.length; ) {
  const file = queue.shift();
  if (modules.includes(file)) continue;
  modules.push(file);
  const code = readFileSync(join(dist, file), "utf8");
  for (const [, name] of code.matchAll(/^(?:import|export)\b[^;]*?["']\.\/([\w.-]+\.js)["']/gms)) queue.push(name);
}
modules.sort();

mkdirSync(target, { recursive: true });
for (const file of readdirSync(target)) {
  if (!modules.includes(file)) rmSync(join(target, file)); // a module the client no longer has
}
for (const file of modules) {
  // The source maps stay behind (they point into src/, which the package does not ship).
  const code = readFileSync(join(dist, file), "utf8").replace(/\n\/\/# sourceMappingURL=\S+\s*$/, "\n");
  writeFileSync(join(target, file), header.replace("%s", file) + code);
}
console.log(`vendored ${modules.length} modules into ${target}`);

// Build (npm run build) unless dist/ is newer than every source: src/, tsconfig.json, openapi.yaml.
import { execSync } from "node:child_process";
import { existsSync, readdirSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const built = join(root, "dist", "index.js");
const sources = [
  join(root, "tsconfig.json"),
  join(root, "package.json"),
  join(root, "..", "..", "openapi.yaml"),
  ...readdirSync(join(root, "src"))
    .filter((name) => name !== "openapi.d.ts") // written by the build itself
    .map((name) => join(root, "src", name)),
].filter((path) => existsSync(path));
const stale = !existsSync(built) || sources.some((path) => statSync(path).mtimeMs > statSync(built).mtimeMs);
if (stale) execSync("npm run build", { cwd: root, stdio: "inherit" });
else console.log("dist/ is up to date");

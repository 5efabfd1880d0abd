// tsc emits no declaration file for src/openapi.d.ts (a declaration file itself): copy it to dist/.
import { copyFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
copyFileSync(join(root, "src", "openapi.d.ts"), join(root, "dist", "openapi.d.ts"));

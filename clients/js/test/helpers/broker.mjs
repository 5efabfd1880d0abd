// A real Wharf broker for the tests: `python -m app` in a child process, on a free port, with a store
// in a temporary directory (small files, as the broker's own end-to-end tests use).
import { spawn } from "node:child_process";
import { mkdtempSync, openSync, closeSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const PACKAGE_DIR = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const REPO_ROOT = resolve(PACKAGE_DIR, "..", "..");

/** The broker's Python: WHARF_PYTHON, else the repository's venv (../../.venv/bin/python). */
export function pythonPath() {
  const configured = process.env.WHARF_PYTHON;
  if (configured) return resolve(PACKAGE_DIR, configured);
  return resolve(PACKAGE_DIR, "..", "..", ".venv", "bin", "python");
}

export function freePort() {
  return new Promise((ok, fail) => {
    const server = createServer();
    server.unref();
    server.on("error", fail);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => ok(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export class Broker {
  constructor({ port, dir, settings = {} }) {
    this.port = port;
    this.dir = dir;
    this.url = `http://127.0.0.1:${port}`;
    this.logPath = join(dir, "broker.log");
    this.env = {
      ...process.env,
      WHARF_HOST: "127.0.0.1",
      WHARF_PORT: String(port),
      WHARF_STORE_DIR: join(dir, "store"),
      WHARF_COMMITLOG_FILE_SIZE: "1048576",
      WHARF_CONSUMEQUEUE_FILE_ENTRIES: "1000",
      WHARF_MAX_HASH_SLOTS: "16384",
      WHARF_MAX_INDEX_COUNT: "65536",
      WHARF_LOG_LEVEL: "warning",
      ...settings,
    };
    this.child = null;
  }

  /** Start a broker (a fresh store unless `dir` is given) and wait for GET /readyz 200. */
  static async start({ settings = {}, dir } = {}) {
    const broker = new Broker({
      port: await freePort(),
      dir: dir ?? mkdtempSync(join(tmpdir(), "wharf-js-")),
      settings,
    });
    await broker.launch();
    return broker;
  }

  async launch(timeoutMs = 60000) {
    const log = openSync(this.logPath, "a");
    const child = spawn(pythonPath(), ["-m", "app"], {
      cwd: REPO_ROOT,
      env: this.env,
      stdio: ["ignore", log, log],
    });
    closeSync(log);
    this.child = child;
    let exited = null;
    child.once("exit", (code, signal) => {
      exited = { code, signal };
    });
    child.once("error", (error) => {
      exited = { error };
    });
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if (exited) throw new Error(`the broker exited (${JSON.stringify(exited)}):\n${this.log()}`);
      try {
        const response = await fetch(`${this.url}/readyz`, { signal: AbortSignal.timeout(1000) });
        if (response.status === 200) return;
      } catch {
        // not listening yet
      }
      await sleep(50);
    }
    await this.stop();
    throw new Error(`the broker was not ready in ${timeoutMs} ms:\n${this.log()}`);
  }

  log() {
    try {
      return readFileSync(this.logPath, "utf8");
    } catch {
      return "";
    }
  }

  /** SIGTERM (the broker closes its sockets with 1001), SIGKILL after `timeoutMs`. */
  async stop(timeoutMs = 20000) {
    const child = this.child;
    if (!child) return;
    this.child = null;
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((ok) => child.once("exit", ok));
    child.kill("SIGTERM");
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    await exited;
    clearTimeout(timer);
  }

  /** Stop and start again on the same port and store. */
  async restart() {
    await this.stop();
    await this.launch();
  }

  /** Stop it and remove its directory. */
  async dispose() {
    await this.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** The broker of the test run (`npm test` starts one and names it in WHARF_TEST_URL), or one of this
 * file's own. `release()` stops it if it is this file's. */
export async function sharedBroker() {
  const url = process.env.WHARF_TEST_URL;
  if (url) return { url, release: async () => undefined };
  const broker = await Broker.start();
  return { url: broker.url, release: () => broker.dispose() };
}

// Headless Chromium (Debian's /usr/bin/chromium, or WHARF_CHROMIUM) driven over the Chrome DevTools
// Protocol with `ws`: no browser download, no puppeteer. Pages are served by intercepting requests
// (Fetch domain), so a test page can live on the broker's own origin without touching the broker.
import { spawn } from "node:child_process";
import { accessSync, constants, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { WebSocket } from "ws";

const FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-dev-shm-usage",
  "--disable-quic",
  "--no-first-run",
  "--no-default-browser-check",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--disable-extensions",
  "--remote-debugging-port=0",
];

export function chromiumPath() {
  const candidates = [process.env.WHARF_CHROMIUM, "/usr/bin/chromium", "/usr/bin/chromium-browser"].filter(Boolean);
  for (const candidate of candidates) {
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // next
    }
  }
  return null;
}

class Cdp {
  constructor(socket) {
    this.socket = socket;
    this.nextId = 1;
    this.calls = new Map();
    this.listeners = new Map();
    socket.on("message", (data) => {
      const message = JSON.parse(String(data));
      if (message.id !== undefined) {
        const call = this.calls.get(message.id);
        this.calls.delete(message.id);
        if (!call) return;
        if (message.error) call.reject(new Error(`${call.method}: ${message.error.message}`));
        else call.resolve(message.result);
        return;
      }
      for (const listener of this.listeners.get(message.method) ?? []) listener(message.params, message.sessionId);
    });
    socket.on("close", () => {
      for (const call of this.calls.values()) call.reject(new Error("the DevTools connection closed"));
      this.calls.clear();
    });
  }

  send(method, params = {}, sessionId) {
    const id = this.nextId++;
    const frame = { id, method, params };
    if (sessionId) frame.sessionId = sessionId;
    return new Promise((resolve, reject) => {
      this.calls.set(id, { resolve, reject, method });
      this.socket.send(JSON.stringify(frame));
    });
  }

  on(method, listener) {
    if (!this.listeners.has(method)) this.listeners.set(method, []);
    this.listeners.get(method).push(listener);
  }
}

export async function launchChromium() {
  const executable = chromiumPath();
  if (!executable) throw new Error("chromium is not installed (apt-get install chromium), or set WHARF_CHROMIUM");
  const profile = mkdtempSync(join(tmpdir(), "wharf-chromium-"));
  const child = spawn(executable, [...FLAGS, `--user-data-dir=${profile}`, "about:blank"], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  const endpoint = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`chromium did not start:\n${stderr}`)), 30000);
    child.stderr.on("data", (chunk) => {
      stderr += chunk;
      const match = /DevTools listening on (ws:\/\/\S+)/.exec(stderr);
      if (match) {
        clearTimeout(timer);
        resolve(match[1]);
      }
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`chromium exited with ${code}:\n${stderr}`));
    });
  });
  const socket = new WebSocket(endpoint, { perMessageDeflate: false, maxPayload: 256 * 1024 * 1024 });
  await new Promise((resolve, reject) => {
    socket.once("open", resolve);
    socket.once("error", reject);
  });
  const cdp = new Cdp(socket);
  return {
    cdp,
    async close() {
      try {
        await Promise.race([cdp.send("Browser.close"), new Promise((r) => setTimeout(r, 2000))]);
      } catch {
        // gone already
      }
      socket.terminate();
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((resolve) => child.once("exit", resolve));
        const timer = setTimeout(() => child.kill("SIGKILL"), 5000);
        await exited;
        clearTimeout(timer);
      }
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/**
 * A page at `url` (a real page of the server: a WebSocket opened by a document that interception
 * answered fails in Chromium), whose requests under `prefix` are answered by `serve(path)` ->
 * {body, type} (or null for a 404), everything else going to the network (the broker). Returns
 * `evaluate(expression, timeoutMs)` (awaits a promise, returns its value by JSON) and the page's
 * console lines.
 */
export async function openPage(cdp, { url, prefix, serve }) {
  const { targetId } = await cdp.send("Target.createTarget", { url: "about:blank" });
  const { sessionId } = await cdp.send("Target.attachToTarget", { targetId, flatten: true });
  const logs = [];
  cdp.on("Fetch.requestPaused", async (params, session) => {
    if (session !== sessionId) return;
    if (!params.request.url.startsWith(prefix)) {
      logs.push(`paused outside the prefix: ${params.request.url}`);
      await cdp.send("Fetch.continueRequest", { requestId: params.requestId }, sessionId).catch(() => undefined);
      return;
    }
    const path = params.request.url.slice(prefix.length).split(/[?#]/)[0];
    const found = serve(path);
    try {
      if (found) {
        await cdp.send(
          "Fetch.fulfillRequest",
          {
            requestId: params.requestId,
            responseCode: 200,
            responseHeaders: [
              { name: "Content-Type", value: found.type },
              { name: "Cache-Control", value: "no-store" },
            ],
            body: Buffer.from(found.body).toString("base64"),
          },
          sessionId,
        );
      } else {
        await cdp.send(
          "Fetch.fulfillRequest",
          { requestId: params.requestId, responseCode: 404, body: Buffer.from("not found").toString("base64") },
          sessionId,
        );
      }
    } catch (error) {
      logs.push(`fulfil ${path}: ${error.message}`);
    }
  });
  cdp.on("Runtime.consoleAPICalled", (params, session) => {
    if (session === sessionId) logs.push(`console.${params.type}: ${params.args.map((a) => a.value ?? a.description).join(" ")}`);
  });
  cdp.on("Runtime.exceptionThrown", (params, session) => {
    if (session === sessionId) logs.push(`exception: ${params.exceptionDetails.exception?.description ?? params.exceptionDetails.text}`);
  });
  await cdp.send("Fetch.enable", { patterns: [{ urlPattern: `${prefix}*` }] }, sessionId);
  await cdp.send("Runtime.enable", {}, sessionId);
  await cdp.send("Page.enable", {}, sessionId);
  const loaded = new Promise((resolve) =>
    cdp.on("Page.loadEventFired", (_, session) => {
      if (session === sessionId) resolve();
    }),
  );
  const navigation = await cdp.send("Page.navigate", { url }, sessionId);
  if (navigation.errorText) throw new Error(`navigation failed: ${navigation.errorText}`);
  await loaded;
  return {
    logs,
    async evaluate(expression, timeoutMs = 60000) {
      let timer;
      const answer = await Promise.race([
        cdp.send("Runtime.evaluate", { expression, awaitPromise: true, returnByValue: true, userGesture: true }, sessionId),
        new Promise((_, reject) => {
          timer = setTimeout(() => reject(new Error(`the page took over ${timeoutMs} ms:\n${logs.join("\n")}`)), timeoutMs);
        }),
      ]).finally(() => clearTimeout(timer));
      if (answer.exceptionDetails) {
        const details = answer.exceptionDetails;
        throw new Error(`in the page: ${details.exception?.description ?? details.text}\n${logs.join("\n")}`);
      }
      return answer.result.value;
    },
  };
}

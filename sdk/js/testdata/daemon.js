// The real touba-trigger daemon for the worker tests (test/connect.test.js):
// built once from the repository with go, run on SQLite files in a
// temporary folder with a program whose trigger calls a worker binding
// (the shapes of tests/workers), and read back through its CLI.

import { execFile, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const run = promisify(execFile);
const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");

export const TOKEN = "wk-token-js-5e1a";
export const POST_TOOL = "tool:wk/Post";
export const TRIGGER = "wk/Orders";

const PROGRAM = JSON.stringify({
  air_version: "touba-air-v1",
  triggers: [
    {
      ref: `trigger:${TRIGGER}`,
      source: { kind: "webhook" },
      steps: [{ id: "post", tool: POST_TOOL, input: { order: { $ref: "/event/body" } } }],
      retry: { max_attempts: 5, initial_interval_ms: 50, max_interval_ms: 200 },
    },
  ],
});

const MANIFEST = JSON.stringify({
  manifest_version: "touba-manifest-v1",
  bindings: {
    [POST_TOOL]: {
      handler: { kind: "worker", token: { env: "WK_TOKEN" } },
      grants: [],
      timeout_ms: 10000,
      circuit: null,
      effect_contract: { kind: "external_write", retry_mode: "idempotency_key" },
    },
  },
});

// go is the go command, or null when this machine has none.
function go() {
  for (const dir of [...(process.env.PATH ?? "").split(path.delimiter), "/usr/local/go/bin"]) {
    const p = path.join(dir, "go");
    if (dir && existsSync(p)) return p;
  }
  return null;
}

let built = null;

/**
 * binary builds cmd/touba-trigger once per test process and resolves with
 * { bin, dir } ({ skip } with the reason when go is missing). The caller
 * removes dir when done.
 */
export function binary() {
  built ??= (async () => {
    const goCmd = go();
    if (!goCmd) return { skip: "go is not installed: the worker tests need it to build the daemon (./cmd/touba-trigger)" };
    const dir = await mkdtemp(path.join(tmpdir(), "touba-sdk-js-"));
    const bin = path.join(dir, "touba-trigger");
    await run(goCmd, ["build", "-o", bin, "./cmd/touba-trigger"], { cwd: REPO, maxBuffer: 16 << 20 });
    return { bin, dir };
  })();
  return built;
}

/** waitFor polls cond every 50 ms until it is true, or throws after timeoutMs. */
export async function waitFor(cond, timeoutMs, what, explain = () => "") {
  const end = Date.now() + timeoutMs;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs}ms waiting for ${what}\n${explain()}`);
    await new Promise((resolve) => setTimeout(resolve, 50)); // the poll's period
  }
}

/**
 * World is one test's files and daemon: start, stop (SIGTERM) and start
 * again on the same files and address; send deliveries; ask the CLI.
 */
export class World {
  static async create(bin) {
    const dir = await mkdtemp(path.join(tmpdir(), "touba-wk-"));
    await writeFile(path.join(dir, "program.air.json"), PROGRAM);
    await writeFile(path.join(dir, "touba.manifest.json"), MANIFEST);
    return new World(bin, dir);
  }

  constructor(bin, dir) {
    this.bin = bin;
    this.dir = dir;
    this.admin = path.join(dir, "admin.sock");
    this.addr = null;
    this.child = null;
    this.log = "";
    this.accepted = []; // event ids, in the order the daemon accepted them
  }

  get url() {
    return `http://${this.addr}`;
  }

  /** start runs the daemon (on the last address, so workers find it again). */
  async start() {
    const f = (name) => path.join(this.dir, name);
    const args = ["serve", f("program.air.json"), "--manifest", f("touba.manifest.json"), "--queue", f("q.sqlite"),
      "--state", f("s.sqlite"), "--effect-journal", f("j.sqlite"), "--listen", this.addr ?? "127.0.0.1:0",
      "--metrics-listen", "127.0.0.1:0", "--admin-socket", this.admin, "--log-level", "info", "--workers", "8",
      "--take-over-stale-lock"];
    const child = spawn(this.bin, args, { env: { ...process.env, WK_TOKEN: TOKEN }, stdio: ["ignore", "ignore", "pipe"] });
    this.child = child;
    child.exited = new Promise((resolve) => child.on("exit", (code, sig) => resolve(code ?? sig)));
    const addr = new Promise((resolve, reject) => {
      let rest = "";
      child.stderr.setEncoding("utf8");
      child.stderr.on("data", (chunk) => {
        this.log += chunk;
        rest += chunk;
        const lines = rest.split("\n");
        rest = lines.pop();
        for (const line of lines) {
          try {
            const m = JSON.parse(line);
            if (m.message === "listening") resolve(m.addr);
          } catch {
            // not a log line of the daemon's
          }
        }
      });
      child.exited.then((code) => reject(new Error(`daemon exited (${code}) before listening\n${this.log}`)));
    });
    this.addr = await Promise.race([
      addr,
      new Promise((_, reject) => setTimeout(() => reject(new Error(`daemon did not listen\n${this.log}`)), 30_000).unref()),
    ]);
  }

  /** stop ends the daemon with SIGTERM and waits for it to exit 0. */
  async stop() {
    this.child.kill("SIGTERM");
    const code = await this.child.exited;
    if (code !== 0) throw new Error(`daemon exit ${code} after SIGTERM\n${this.log}`);
    this.child = null;
  }

  /** close kills a daemon still running and removes the files. */
  async close() {
    if (this.child) {
      this.child.kill("SIGKILL");
      await this.child.exited;
    }
    await rm(this.dir, { recursive: true, force: true });
  }

  /** send posts one delivery per event id; each must be accepted (202). */
  async send(...ids) {
    for (const id of ids) {
      const resp = await fetch(`${this.url}/triggers/${TRIGGER}`, {
        method: "POST",
        headers: { "Content-Type": "application/json", "X-Touba-Event-Id": id },
        body: JSON.stringify({ order_id: id }),
      });
      const text = await resp.text();
      if (resp.status !== 202) throw new Error(`post ${id}: ${resp.status} ${text}`);
      this.accepted.push(id);
    }
  }

  /** cli runs touba-trigger args against the admin socket and parses --json. */
  async cli(...args) {
    const { stdout } = await run(this.bin, [...args, "--admin-socket", this.admin, "--json"], { maxBuffer: 64 << 20 });
    return JSON.parse(stdout);
  }

  /** entries lists the queue's entries with status (all when ""). */
  entries(status = "") {
    return this.cli("queue", "ls", "--limit", "100000", ...(status ? ["--status", status] : []));
  }

  /** effects lists the effect journal. */
  effects() {
    return this.cli("effects", "ls", "--limit", "100000");
  }

  /** waitDone waits until n entries are done. */
  waitDone(n, timeoutMs = 30_000) {
    return waitFor(async () => (await this.entries("done")).length >= n, timeoutMs, `${n} entries done`, () => this.log);
  }
}

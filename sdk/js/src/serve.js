// Serving a tool on a pair of streams in either mode of SPEC §4.1, and
// defineTool, which serves on the process's stdin and stdout and exits.

import { createInterface } from "node:readline";
import { Codes, MODE_ENV } from "./protocol.js";
import { Tool } from "./tool.js";

/**
 * serveOne reads exactly one JSON request from input, answers it and
 * writes one response to output. Whatever the request holds, it answers (an
 * unreadable one gets HandlerProtocolError). It does not wait for input to
 * end once a whole document has arrived, so the host need not close stdin.
 */
export async function serveOne(tool, input, output, { signal } = {}) {
  const text = await readOneDocument(input);
  const line =
    text.trim() === ""
      ? JSON.stringify({ ok: false, error: { code: Codes.ProtocolError, message: "no request on stdin" } }) + "\n"
      : await tool.handleLine(text, { signal });
  await write(output, line);
}

// readOneDocument collects input until it holds one whole JSON document or
// ends. A partial object never parses, so the first successful parse of a
// text ending in "}" is the whole request.
function readOneDocument(input) {
  return new Promise((resolve, reject) => {
    // A parse is tried when the text ends in "}" and the stream paused (a
    // short chunk) or the text doubled since the last try, and at the end:
    // parsing at every "}" would cost O(n^2) on a large request.
    let chunks = [];
    let total = 0;
    let tried = 0;
    const done = (text) => {
      input.off("data", onData);
      input.off("end", onEnd);
      input.off("error", onError);
      input.pause();
      resolve(text);
    };
    const onData = (chunk) => {
      const buf = typeof chunk === "string" ? Buffer.from(chunk) : chunk;
      chunks.push(buf);
      total += buf.length;
      const short = buf.length < (input.readableHighWaterMark || 65536);
      if (!buf.toString("utf8", Math.max(0, buf.length - 64)).trimEnd().endsWith("}") || !(short || total >= 2 * tried)) {
        return;
      }
      tried = total;
      const whole = Buffer.concat(chunks);
      chunks = [whole];
      const text = whole.toString("utf8");
      try {
        JSON.parse(text);
        done(text);
      } catch {
        // not whole yet
      }
    };
    const onEnd = () => done(Buffer.concat(chunks).toString("utf8"));
    const onError = (err) => reject(err);
    input.on("data", onData);
    input.on("end", onEnd);
    input.on("error", onError);
  });
}

/**
 * servePersistent reads one compact JSON request per line from input and
 * runs each call concurrently, writing each response as one line with a
 * top-level call_id, in the order calls finish. When input ends it waits
 * for the calls in flight and resolves. When signal aborts it stops
 * reading, lets the calls in flight see the abort (context.signal) and
 * resolves once they have answered.
 */
export async function servePersistent(tool, input, output, { signal } = {}) {
  const rl = createInterface({ input, crlfDelay: Infinity, terminal: false });
  const inFlight = new Set();
  let writeError = null;
  const stop = () => rl.close();
  signal?.addEventListener("abort", stop, { once: true });
  try {
    for await (const line of rl) {
      if (line.trim() === "") continue;
      const p = tool
        .handleLine(line, { persistent: true, signal })
        .then((resp) => write(output, resp))
        .catch((err) => {
          writeError ??= err;
        })
        .finally(() => inFlight.delete(p));
      inFlight.add(p);
    }
  } finally {
    signal?.removeEventListener("abort", stop);
  }
  while (inFlight.size > 0) await Promise.all([...inFlight]);
  if (writeError) throw writeError;
}

function write(output, text) {
  return new Promise((resolve, reject) => {
    output.write(text, (err) => (err ? reject(err) : resolve()));
  });
}

/**
 * defineTool checks the definition and serves it on stdin and stdout: with
 * TOUBA_HANDLER_MODE=persistent one request per line until stdin closes,
 * otherwise exactly one request (SPEC §4.1), so one handler file works both
 * ways. The process then exits: 0 when every request was answered, 1 when
 * stdout failed. SIGTERM and SIGINT abort context.signal of the calls in
 * flight so they can still answer; a second signal kills the process. One
 * tool per process. An invalid definition rejects before anything is read.
 */
export async function defineTool(definition) {
  const tool = new Tool(definition);
  const controller = new AbortController();
  const onSignal = () => {
    // Back to the default action, so a second signal kills the process.
    process.off("SIGTERM", onSignal);
    process.off("SIGINT", onSignal);
    controller.abort(new Error("the process was asked to stop"));
  };
  process.on("SIGTERM", onSignal);
  process.on("SIGINT", onSignal);
  // A promise a handler forgot to await must not kill the process and
  // with it every call in flight (Node 20 exits on an unhandled rejection).
  process.on("unhandledRejection", (err) => {
    process.stderr.write(`${tool.toolRef}: unhandled rejection: ${err?.message ?? err}\n`);
  });
  let code = 0;
  try {
    if (process.env[MODE_ENV] === "persistent") {
      await servePersistent(tool, process.stdin, process.stdout, { signal: controller.signal });
    } else {
      await serveOne(tool, process.stdin, process.stdout, { signal: controller.signal });
    }
  } catch (err) {
    process.stderr.write(`${tool.toolRef}: ${err?.message ?? err}\n`);
    code = 1;
  }
  // Exit now: sockets kept alive or timers left by run must not hold the
  // process, since the host waits for it to exit.
  process.exit(code);
}

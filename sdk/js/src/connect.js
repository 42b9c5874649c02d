// Workers that connect out (SPEC §4.3): a binding of kind worker has no
// address; its calls wait in the daemon until a worker takes them over
// POST /workers/v1/take and answers them over POST /workers/v1/answer,
// with the binding's token. connect runs such a worker over the same
// tools defineTool serves as a process and createHttpHandler over HTTP,
// and behaves as the Go SDK's handler.Connect.

import { Tool } from "./tool.js";

/** The calls a worker runs at once unless told otherwise. */
export const DEFAULT_MAX_IN_FLIGHT = 16;

/** How long one take long-polls unless told otherwise (the daemon allows at most 60 s). */
export const DEFAULT_TAKE_WAIT_MS = 30_000;

const FIRST_BACKOFF_MS = 200;
const MAX_BACKOFF_MS = 30_000;
const MAX_ANSWER_BACKOFF_MS = 5_000;
// A take may take wait_ms; past this much more the daemon is not answering.
const TAKE_GRACE_MS = 30_000;

const OPTIONS = ["url", "token", "tools", "maxInFlight", "ahead", "takeWaitMs", "signal", "log", "onCall"];

/**
 * ToubaWorkerRefusedError: the daemon refused the worker's token (401,
 * WorkerUnauthorized) or a tool it names (403, WorkerForbidden). connect
 * rejects with it, since retrying cannot help.
 */
export class ToubaWorkerRefusedError extends Error {
  constructor(status, code, message) {
    super(`the daemon refused the worker: ${status} ${code}: ${message}`);
    this.name = "ToubaWorkerRefusedError";
    this.status = status;
    this.code = code;
  }
}

/**
 * ToubaNoAnswer, thrown by a tool's run in a worker, sends no answer: the
 * call then ends as a timeout in the daemon, unknown for an external write
 * (SPEC §4.3), which is what a worker that cannot tell whether the write
 * happened should say. Elsewhere it is an error like any other.
 */
export class ToubaNoAnswer extends Error {
  constructor(message = "no answer") {
    super(message);
    this.name = "ToubaNoAnswer";
  }
}

// statusError is an answer of the daemon other than 200.
class StatusError extends Error {
  constructor(status, code, message) {
    super(code ? `${status} ${code}: ${message}` : `HTTP ${status}`);
    this.status = status;
  }
}

/**
 * connect runs a worker of tools (Tools from createTool, or definitions as
 * defineTool takes) against the daemon at url (its --listen address) with
 * the worker binding's token. It takes calls with long polls of takeWaitMs
 * (up to ahead more than it can run: maxInFlight by default, none when
 * maxInFlight is 1), runs up to maxInFlight at once in the order taken
 * (a call taken ahead and past its deadline before it could start is not
 * run), answers each, and reconnects with
 * jittered backoff (200 ms doubling to 30 s) while the daemon cannot be
 * reached or answers 5xx, saying so through log. When signal aborts it
 * takes no more calls, finishes and answers those in hand, and resolves.
 * It rejects with ToubaWorkerRefusedError on a 401 or 403 (once the calls
 * in hand are answered), and with a TypeError on bad options.
 *
 * onCall(request, response, tookMs), when given, is called after each call
 * ends, answered or (after ToubaNoAnswer) not, for a summary line.
 */
export async function connect(options = {}) {
  for (const key of Object.keys(options)) {
    if (!OPTIONS.includes(key)) throw new TypeError(`connect: unknown option ${JSON.stringify(key)} (want ${OPTIONS.join(", ")})`);
  }
  const { url, token, signal, onCall } = options;
  if (typeof url !== "string" || !/^https?:\/\//.test(url)) throw new TypeError("connect: url is not an http(s) URL");
  if (typeof token !== "string" || token === "") throw new TypeError("connect: token is empty");
  const maxInFlight = options.maxInFlight ?? DEFAULT_MAX_IN_FLIGHT;
  if (!Number.isSafeInteger(maxInFlight) || maxInFlight < 1) throw new TypeError("connect: maxInFlight is not a positive integer");
  // Calls taken before there is room to run them, so the next ones are in
  // hand when one ends (see the Go SDK's Worker.Ahead): maxInFlight more
  // by default, none at maxInFlight 1, which keeps the daemon's order.
  const ahead = Math.max(options.ahead ?? (maxInFlight > 1 ? maxInFlight : 0), 0);
  if (!Number.isSafeInteger(ahead)) throw new TypeError("connect: ahead is not an integer");
  const takeWaitMs = options.takeWaitMs ?? DEFAULT_TAKE_WAIT_MS;
  if (!Number.isSafeInteger(takeWaitMs) || takeWaitMs < 1) throw new TypeError("connect: takeWaitMs is not a positive integer");
  if (onCall !== undefined && typeof onCall !== "function") throw new TypeError("connect: onCall is not a function");
  if (options.log !== undefined && typeof options.log !== "function") throw new TypeError("connect: log is not a function");
  const log = options.log ?? ((msg) => process.stderr.write(`${msg}\n`));
  const w = new Conn({ base: url.replace(/\/+$/, ""), token, log, onCall, takeWaitMs, maxInFlight, ahead });
  if (!Array.isArray(options.tools) || options.tools.length === 0) throw new TypeError("connect: a worker needs at least one tool");
  for (const t of options.tools) w.add(t instanceof Tool ? t : new Tool(t));
  return w.run(signal);
}

// Conn is one connect's state.
class Conn {
  constructor(settings) {
    Object.assign(this, settings);
    this.tools = new Map(); // tool_ref -> Tool that runs it here
    this.inFlight = new Set(); // promises of the calls in hand: taken, not yet answered
    this.running = 0; // calls running: at most maxInFlight
    this.turns = []; // resolvers of the calls taken ahead, in the order taken
    this.noAnswer = new Set(); // call ids whose run threw ToubaNoAnswer
    this.down = false; // the last take failed: say so when one succeeds
    this.roomFreed = null; // wakes the loop waiting for room
    this.stopped = null; // wakes the loop's wait before the next try
  }

  // add keeps a copy of tool whose run notes ToubaNoAnswer by call id.
  add(tool) {
    const noAnswer = this.noAnswer;
    const run = tool._run;
    this.tools.set(
      tool.toolRef,
      new Tool({
        toolRef: tool.toolRef,
        inputSignature: tool.inputSignature ? [...tool.inputSignature] : undefined,
        outputType: tool.outputType ?? undefined,
        requiredGrants: [...tool.requiredGrants],
        log: tool._log,
        run: async (args) => {
          try {
            return await run(args);
          } catch (err) {
            if (!(err instanceof ToubaNoAnswer)) throw err;
            noAnswer.add(args.context.call_id);
            return null; // never sent
          }
        },
      }),
    );
  }

  async run(signal) {
    // Resolvers of what the loop waits for, woken without piling reactions
    // on a promise that lives as long as the worker.
    const wake = () => {
      this.roomFreed?.();
      this.stopped?.();
    };
    signal?.addEventListener("abort", wake, { once: true });
    try {
      await this.loop(signal);
    } finally {
      signal?.removeEventListener("abort", wake);
      while (this.inFlight.size > 0) await Promise.all([...this.inFlight]);
    }
  }

  async loop(signal) {
    let backoff = FIRST_BACKOFF_MS;
    const refs = [...this.tools.keys()];
    for (;;) {
      // Wait for room for at least one call, then ask for as many as
      // there is room for.
      while (this.inFlight.size >= this.maxInFlight + this.ahead && !signal?.aborted) {
        await new Promise((resolve) => (this.roomFreed = resolve));
        this.roomFreed = null;
      }
      if (signal?.aborted) return;
      let calls;
      try {
        calls = await this.take(refs, this.maxInFlight + this.ahead - this.inFlight.size, signal);
      } catch (err) {
        if (signal?.aborted) return;
        if (err instanceof ToubaWorkerRefusedError) throw err;
        const wait = Math.round(backoff / 2 + Math.random() * (backoff / 2));
        this.log(`touba worker: cannot reach ${this.base}: ${describe(err)}; retrying in ${wait}ms`);
        this.down = true;
        backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
        let timer;
        await new Promise((resolve) => {
          this.stopped = resolve;
          timer = setTimeout(resolve, wait);
        });
        clearTimeout(timer);
        this.stopped = null;
        continue;
      }
      if (this.down) {
        this.down = false;
        this.log(`touba worker: connected to ${this.base} again`);
      }
      backoff = FIRST_BACKOFF_MS;
      for (const call of calls) {
        const p = this.serveInTurn(call).finally(() => {
          this.inFlight.delete(p);
          this.roomFreed?.();
        });
        this.inFlight.add(p);
      }
    }
  }

  // take asks for up to n calls.
  async take(refs, n, signal) {
    const body = JSON.stringify({ tools: refs, max: n, wait_ms: this.takeWaitMs });
    const limit = AbortSignal.timeout(this.takeWaitMs + TAKE_GRACE_MS);
    const text = await this.post("/workers/v1/take", body, signal ? AbortSignal.any([signal, limit]) : limit);
    const got = JSON.parse(text);
    if (!Array.isArray(got?.calls)) throw new Error("take answer: no calls array");
    return got.calls;
  }

  // serveInTurn runs call once fewer than maxInFlight run, in the order
  // taken. A call taken ahead whose deadline passed before it could start
  // is not run: the daemon has ended it (unknown) already, and may hand it
  // to another worker.
  async serveInTurn(call) {
    if (this.running < this.maxInFlight) this.running++;
    else await new Promise((resolve) => this.turns.push(resolve)); // the slot is handed over
    try {
      const due = call?.context?.deadline_unix_ms;
      if (Number.isSafeInteger(due) && due > 0 && Date.now() >= due) {
        this.log(`touba worker: call ${call?.context?.call_id} was past its deadline before it could start; not run`);
        return;
      }
      await this.serve(call);
    } finally {
      const next = this.turns.shift();
      if (next) next();
      else this.running--;
    }
  }

  // serve runs one call and answers it. The call runs to its end even when
  // the worker is stopping (a clean stop finishes the calls in hand); its
  // deadline is the request's. It never rejects.
  async serve(call) {
    const start = performance.now();
    const callId = typeof call?.context?.call_id === "string" ? call.context.call_id : "";
    try {
      // A call for a tool this worker lacks is answered ToolRefMismatch by the first one.
      const tool = this.tools.get(call?.tool_ref) ?? this.tools.values().next().value;
      const line = await tool.handleLine(JSON.stringify(call), { persistent: true });
      const skip = this.noAnswer.delete(callId);
      if (!skip) await this.answer(call, line);
      this.onCall?.(call, JSON.parse(line), performance.now() - start);
    } catch (err) {
      this.log(`touba worker: call ${callId}: ${err?.stack ?? err}`);
    }
  }

  // answer posts body, retrying while the daemon cannot be reached and the
  // call's deadline has not passed; the daemon refusing it (409: the call
  // timed out meanwhile) is logged.
  async answer(call, body) {
    const callId = call?.context?.call_id;
    const due = call?.context?.deadline_unix_ms;
    const deadline = Number.isSafeInteger(due) && due > 0 ? due : Date.now() + 60_000;
    let backoff = FIRST_BACKOFF_MS;
    for (;;) {
      try {
        await this.post("/workers/v1/answer", body, AbortSignal.timeout(Math.max(1, deadline + 5_000 - Date.now())));
        return;
      } catch (err) {
        const status = err.status ?? 0;
        if (status > 0 && status < 500 && status !== 429) {
          this.log(`touba worker: answer to call ${callId} refused: ${err.message}`);
          return;
        }
        if (Date.now() > deadline) {
          this.log(`touba worker: cannot answer call ${callId} before its deadline: ${describe(err)}`);
          return;
        }
      }
      // The daemon is unreachable: wait before the next try.
      await new Promise((resolve) => setTimeout(resolve, backoff));
      backoff = Math.min(backoff * 2, MAX_ANSWER_BACKOFF_MS);
    }
  }

  // post sends body to the daemon's path with the worker's token and
  // returns the answer's text. 401 and 403 are ToubaWorkerRefusedError.
  async post(path, body, signal) {
    const resp = await fetch(this.base + path, {
      method: "POST",
      headers: { "Content-Type": "application/json", Authorization: `Bearer ${this.token}` },
      body,
      signal,
    });
    const text = await resp.text();
    if (resp.status === 200) return text;
    let code = "";
    let message = "";
    try {
      const e = JSON.parse(text)?.error;
      code = typeof e?.code === "string" ? e.code : "";
      message = typeof e?.message === "string" ? e.message : "";
    } catch {
      // not JSON (a proxy's page): the status says enough
    }
    if (resp.status === 401 || resp.status === 403) throw new ToubaWorkerRefusedError(resp.status, code, message);
    throw new StatusError(resp.status, code, message);
  }
}

// describe says why a request failed: fetch hides the reason in cause.
function describe(err) {
  const cause = err?.cause;
  if (cause) return cause.code ? `${cause.code} ${cause.message ?? ""}`.trim() : String(cause.message ?? cause);
  return err?.message ?? String(err);
}

#!/usr/bin/env python3
"""breakdown: reads `go tool pprof -traces` on stdin and prints the CPU time
by category. Each sample goes to the first rule that matches its stack, in
the order below, so the categories add up to the total. Rules look at the
whole stack (leaf first) unless they say leaf: allocation and GC come first
so that malloc under JSON counts as allocation, not JSON."""
import re
import sys

# (category, where, regex): where is "leaf" (the sampled function),
# "batch-not-ops" (C time inside a SQLite writer batch but outside its
# operations: BEGIN and COMMIT), or
# "stack" (any frame).
RULES = [
    ("GC (background mark, sweep, scavenge)", "stack", r"^runtime\.(gcBgMarkWorker|bgsweep|bgscavenge|gcMarkTermination)"),
    ("allocation (malloc, GC assist, write barriers)", "stack", r"^runtime\.(mallocgc|newobject|makeslice|growslice|gcAssistAlloc|wbBufFlush|makemap|newarray|rawstring|rawbyteslice|concatstrings|slicebytetostring|mapassign)"),
    ("WAL checkpoints (background connection)", "stack", r"sqlitex\.\(\*DB\)\.checkpointer"),
    # A sample taken while a thread runs C has runtime.cgocall as its leaf
    # (no C traceback): that is SQLite's own time, fsync's kernel time
    # included. The crossing itself is the Go side of entering and leaving.
    # A SQLite writer batch runs inside sqlitex's backend.Batch: its
    # statements under runOps, its BEGIN and COMMIT outside it.
    ("SQLite commit in C (WAL write + fsync, kernel time included)", "batch-not-ops", r"sqlitex\.\(\*backend\)\.Batch"),
    ("SQLite prepare in C (parsing SQL not cached)", "stack", r"_Cfunc__sqlite3_prepare"),
    ("SQLite statements in C (B-tree, bind, step)", "leaf", r"^(runtime\.cgocall|runtime\._ExternalCode)"),
    ("cgo crossings (enter/exit of C calls)", "stack", r"^(runtime\.(entersyscall|exitsyscall|cgocall|asmcgocall|cgoCheck|reentersyscall)|.*_Cfunc_)"),
    ("logging (zerolog)", "stack", r"rs/zerolog"),
    ("metrics (prometheus)", "stack", r"prometheus"),
    ("tracing (otel)", "stack", r"opentelemetry|touba-trigger/tracing"),
    ("hashing (digest, fingerprint, uuid)", "stack", r"(crypto/|dedupe\.|handler\.Fingerprint|handler\.canonical|uuidv7)"),
    ("JSON (encode, decode, validate)", "stack", r"^encoding/json"),
    ("SQLite driver, Go side (database/sql, go-sqlite3)", "stack", r"(^database/sql|mattn/go-sqlite3)"),
    ("socket syscalls (read, write, accept, epoll)", "leaf", r"^(syscall\.|internal/runtime/syscall|runtime/internal/syscall|runtime\.(netpoll|epoll))"),
    ("HTTP (net/http parsing, headers, responses)", "stack", r"^(net/http|net/textproto|bufio|net\.|github\.com/julienschmidt)"),
    ("scheduler and goroutine hand-offs (park, wake, futex, chans, select)", "stack",
     r"^runtime\.(schedule|findRunnable|park_m|goready|ready|futex|notesleep|notewakeup|wakep|startm|stopm|mcall|gopark|chansend|chanrecv|selectgo|lock2|unlock2|usleep|osyield|runqgrab|stealWork|netpollBreak|goexit|gosched)"),
    ("daemon code (trigger, queue, journal, dispatcher, other)", "stack", r"touba-trigger"),
]

def parse(lines):
    samples, cur = [], None
    for line in lines:
        if line.startswith("-----------+"):
            if cur:
                samples.append(cur)
            cur = None
            continue
        m = re.match(r"^\s+([0-9.]+)(ns|us|µs|ms|s)\s+(\S.*)$", line)
        if m and cur is None:
            v = float(m.group(1)) * {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}[m.group(2)]
            cur = [v, [m.group(3).strip()]]
        elif cur is not None and line.strip():
            cur[1].append(line.strip())
    if cur:
        samples.append(cur)
    return samples

def classify(stack):
    for name, where, rx in RULES:
        if where == "batch-not-ops":
            if any(re.search(rx, f) for f in stack) and not any("runOps" in f for f in stack) and \
                    re.search(r"^(runtime\.cgocall|runtime\._ExternalCode)", stack[0]):
                return name
            continue
        frames = stack[:1] if where == "leaf" else stack
        if any(re.search(rx, f) for f in frames):
            return name
    return "other (runtime, unattributed)"

def main():
    samples = parse(sys.stdin)
    total = sum(v for v, _ in samples) or 1
    by = {}
    for v, st in samples:
        c = classify(st)
        by[c] = by.get(c, 0) + v
    print(f"total CPU sampled: {total:.2f}s")
    for c, v in sorted(by.items(), key=lambda kv: -kv[1]):
        print(f"  {100 * v / total:5.1f}%  {v:7.2f}s  {c}")

main()

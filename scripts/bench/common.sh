# common.sh: shared by scripts/profile and scripts/bench-e2e (sourced).
# Builds the daemon, writes a one-step program on an accounting_stub
# binding (external_write), starts and stops daemons, reads /metrics and
# /proc. Expects WORK set and PIDS an array.

command -v wrk >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk; }
CONNS=${CONNS:-64}
THREADS=${THREADS:-2}

# BIN names a prebuilt daemon to measure instead of this tree's (for a
# before/after in one run: build the old commit elsewhere, pass it here).
bench_setup() {
  if [[ -n "${BIN:-}" ]]; then cp "$BIN" "$WORK/touba-trigger"; else go build -o "$WORK/touba-trigger" ./cmd/touba-trigger; fi
  cat > "$WORK/program.air.json" <<'JSON'
{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:bench/Ingest", "source": {"kind": "webhook"},
   "steps": [{"id": "post", "tool": "tool:bench/Post", "input": {"body": {"$ref": "/event/body"}}}]}]}
JSON
  cat > "$WORK/touba.manifest.json" <<'JSON'
{"manifest_version": "touba-manifest-v1", "bindings": {
  "tool:bench/Post": {"handler": {"kind": "accounting_stub"},
    "effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}}}
JSON
  # Unique ids per thread and run; a 1,024-byte JSON body; counts 202s.
  cat > "$WORK/ingest.lua" <<'LUA'
local threads = {}
function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end
function init(args)
  math.randomseed(os.time() + tid)
  prefix = "b" .. tid .. "-" .. math.random(1, 1000000000) .. "-"
  counter = 0
  accepted = 0
  body = '{"data":"' .. string.rep("x", 1013) .. '"}'
end
function request()
  counter = counter + 1
  return wrk.format("POST", nil, {["X-Touba-Event-Id"] = prefix .. counter, ["Content-Type"] = "application/json"}, body)
end
function response(status, headers, b)
  if status == 202 then accepted = accepted + 1 end
end
function done(summary, latency, requests)
  local total = 0
  for _, t in ipairs(threads) do total = total + t:get("accepted") end
  io.write(string.format("RESULT accepted=%d requests=%d secs=%.3f p50_ms=%.2f p99_ms=%.2f\n",
    total, summary.requests, summary.duration / 1e6,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
LUA
}

wait_http() { for _ in $(seq 1 200); do curl -fs "$1" >/dev/null 2>&1 && return 0; sleep 0.05; done; echo "no answer from $1" >&2; return 1; }
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$2"; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# start_daemon NAME PORT [serve flags...]: files $WORK/NAME-*.sqlite; sets
# DPID. /metrics on PORT+1000.
start_daemon() {
  local name=$1 port=$2; shift 2
  "$WORK/touba-trigger" serve "$WORK/program.air.json" --manifest "$WORK/touba.manifest.json" \
    --queue "$WORK/$name-queue.sqlite" --state "$WORK/$name-state.sqlite" --effect-journal "$WORK/$name-journal.sqlite" \
    --listen "127.0.0.1:$port" --metrics-listen "127.0.0.1:$((port + 1000))" --admin-socket "$WORK/$name-admin.sock" \
    --max-pending 100000000 "$@" 2>>"$WORK/daemon-$name.log" &
  DPID=$!; PIDS+=("$DPID")
  wait_http "http://127.0.0.1:$port/healthz"
}
stop_daemon() { kill -TERM "$DPID"; wait "$DPID" || { echo "daemon exit $?" >&2; tail -5 "$WORK"/daemon-*.log >&2; return 1; }; }

# status_counts PORT STATUS...: entries in each STATUS, on one line, from
# one scrape of /metrics.
status_counts() {
  local port=$1; shift
  curl -fs "http://127.0.0.1:$((port + 1000))/metrics" | awk -v want="$*" '
    BEGIN { n = split(want, s, " ") }
    # On --database the series carry a node_id label as well.
    /^touba_queue_entries\{/ { for (i = 1; i <= n; i++) if (index($1, "status=\""s[i]"\"")) c[i] = $2 }
    END { for (i = 1; i <= n; i++) printf "%d%s", c[i], (i < n ? " " : "\n") }'
}
status_count() { status_counts "$1" "$2"; }
# cpu_ticks PID: user+system clock ticks of the process so far.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
CLK_TCK=$(getconf CLK_TCK)

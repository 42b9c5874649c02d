"""The real touba-trigger daemon for the worker tests (test_connect.py): built
once from the repository with go, run on SQLite files in a temporary folder
with a program whose trigger calls a worker binding (the shapes of
tests/workers), and read back through its CLI."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
TOKEN = "wk-token-py-91c2"
POST_TOOL = "tool:wk/Post"
TRIGGER = "wk/Orders"

PROGRAM = {"air_version": "touba-air-v1", "triggers": [{
    "ref": f"trigger:{TRIGGER}", "source": {"kind": "webhook"},
    "steps": [{"id": "post", "tool": POST_TOOL, "input": {"order": {"$ref": "/event/body"}}}],
    "retry": {"max_attempts": 5, "initial_interval_ms": 50, "max_interval_ms": 200}}]}

MANIFEST = {"manifest_version": "touba-manifest-v1", "bindings": {POST_TOOL: {
    "handler": {"kind": "worker", "token": {"env": "WK_TOKEN"}}, "grants": [], "timeout_ms": 10000,
    "circuit": None, "effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}}}


def wait_for(cond: Callable[[], bool], timeout: float, what: str, explain: Callable[[], str] = lambda: "") -> None:
    """Polls cond every 50 ms until it is true; AssertionError after timeout."""
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{explain()}")
        time.sleep(0.05)  # the poll's period


def build() -> tuple[str, str]:
    """Builds cmd/touba-trigger into a new temporary folder; returns (binary,
    folder). unittest.SkipTest when go is missing."""
    import unittest

    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go") else None)
    if go is None:
        raise unittest.SkipTest("go is not installed: the worker tests need it to build the daemon (./cmd/touba-trigger)")
    folder = tempfile.mkdtemp(prefix="touba-sdk-py-")
    binary = os.path.join(folder, "touba-trigger")
    out = subprocess.run([go, "build", "-o", binary, "./cmd/touba-trigger"], cwd=REPO, capture_output=True, text=True)
    if out.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        raise RuntimeError(f"go build ./cmd/touba-trigger: exit {out.returncode}\n{out.stderr}")
    return binary, folder


class World:
    """One test's files and daemon: start, stop (SIGTERM) and start again on
    the same files and address; send deliveries; ask the CLI."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.dir = tempfile.mkdtemp(prefix="touba-wk-")
        self.admin = os.path.join(self.dir, "admin.sock")
        self.addr = "127.0.0.1:0"
        self.proc: subprocess.Popen | None = None
        self._log: list[str] = []
        self._lock = threading.Lock()
        self.accepted: list[str] = []  # event ids, in the order the daemon accepted them
        for name, doc in (("program.air.json", PROGRAM), ("touba.manifest.json", MANIFEST)):
            Path(self.dir, name).write_text(json.dumps(doc))

    @property
    def url(self) -> str:
        return f"http://{self.addr}"

    def log(self) -> str:
        with self._lock:
            return "".join(self._log)

    def start(self) -> None:
        """Runs the daemon (on the last address, so workers find it again)."""
        f = lambda name: os.path.join(self.dir, name)  # noqa: E731
        args = [self.binary, "serve", f("program.air.json"), "--manifest", f("touba.manifest.json"),
                "--queue", f("q.sqlite"), "--state", f("s.sqlite"), "--effect-journal", f("j.sqlite"),
                "--listen", self.addr, "--metrics-listen", "127.0.0.1:0", "--admin-socket", self.admin,
                "--log-level", "info", "--workers", "8", "--take-over-stale-lock"]
        proc = subprocess.Popen(args, env={**os.environ, "WK_TOKEN": TOKEN}, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.proc = proc
        found: list[str] = []
        listening = threading.Event()

        def pump() -> None:
            for line in proc.stderr:
                with self._lock:
                    self._log.append(line)
                try:
                    m = json.loads(line)
                except ValueError:
                    continue
                if isinstance(m, dict) and m.get("message") == "listening" and not found:
                    found.append(m["addr"])
                    listening.set()
            proc.stderr.close()
            listening.set()  # exited

        self._pump = threading.Thread(target=pump, daemon=True)
        self._pump.start()
        if not listening.wait(30) or not found:
            raise AssertionError(f"the daemon did not listen\n{self.log()}")
        self.addr = found[0]

    def stop(self) -> None:
        """Ends the daemon with SIGTERM; it must exit 0."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(60)
        self._pump.join(10)
        if code != 0:
            raise AssertionError(f"daemon exit {code} after SIGTERM\n{self.log()}")
        self.proc = None

    def close(self) -> None:
        """Kills a daemon still running and removes the files."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self._pump.join(10)
            self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def send(self, *ids: str) -> None:
        """Posts one delivery per event id; each must be accepted (202)."""
        for event_id in ids:
            req = urllib.request.Request(f"{self.url}/triggers/{TRIGGER}", method="POST",
                                         data=json.dumps({"order_id": event_id}).encode(),
                                         headers={"Content-Type": "application/json", "X-Touba-Event-Id": event_id})
            with urllib.request.urlopen(req, timeout=30) as resp:
                if resp.status != 202:
                    raise AssertionError(f"post {event_id}: {resp.status}")
            self.accepted.append(event_id)

    def cli(self, *args: str) -> list:
        """Runs touba-trigger args against the admin socket; parses --json."""
        out = subprocess.run([self.binary, *args, "--admin-socket", self.admin, "--json"], check=True,
                             capture_output=True, text=True, timeout=60)
        return json.loads(out.stdout)

    def entries(self, status: str = "") -> list:
        return self.cli("queue", "ls", "--limit", "100000", *(["--status", status] if status else []))

    def effects(self) -> list:
        return self.cli("effects", "ls", "--limit", "100000")

    def wait_done(self, n: int, timeout: float = 30) -> None:
        wait_for(lambda: len(self.entries("done")) >= n, timeout, f"{n} entries done", self.log)

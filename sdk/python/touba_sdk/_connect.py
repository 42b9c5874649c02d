"""Workers that connect out (SPEC §4.3): a binding of kind worker has no
address; its calls wait in the daemon until a worker takes them over
POST /workers/v1/take and answers them over POST /workers/v1/answer, with the
binding's token. connect runs such a worker over the same Tools define_tool
serves as a process and wsgi_app over HTTP, and behaves as the Go SDK's
handler.Connect."""

from __future__ import annotations

import asyncio
import collections
import http.client
import inspect
import json
import random
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from . import _protocol as p
from ._tool import Tool

DEFAULT_MAX_IN_FLIGHT = 16
"""The calls a worker runs at once unless told otherwise."""

DEFAULT_TAKE_WAIT = 30.0
"""Seconds one take long-polls unless told otherwise (the daemon allows at most 60)."""

_FIRST_BACKOFF = 0.2
_MAX_BACKOFF = 30.0
_MAX_ANSWER_BACKOFF = 5.0
# A take may last take_wait; past this much more the daemon is not answering.
_TAKE_GRACE = 30.0
# How often a worker looks at a stop_event the caller may set: setting an
# Event wakes no one but its waiters, and the loop waits on other things.
_STOP_POLL = 0.05


class WorkerRefusedError(Exception):
    """The daemon refused the worker's token (401, WorkerUnauthorized) or a
    tool it names (403, WorkerForbidden): retrying cannot help."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"the daemon refused the worker: {status} {code}: {message}")
        self.status = status
        self.code = code


class NoAnswer(Exception):
    """Raised by a tool's run in a worker, sends no answer: the call then ends
    as a timeout in the daemon, unknown for an external write (SPEC §4.3),
    which is what a worker that cannot tell whether the write happened should
    say. Elsewhere it is an error like any other."""


class _StatusError(Exception):
    """An answer of the daemon other than 200."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}" if code else f"HTTP {status}")
        self.status = status


class _Stopped(Exception):
    """The take was abandoned because the worker is stopping."""


def _default_log(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


class Worker:
    """A worker of tools (Tool objects, or mappings of define_tool's keyword
    arguments) for the daemon at url (its --listen address) with the worker
    binding's token.

    run() takes calls with long polls of take_wait seconds (up to ahead more
    than it can run: max_in_flight by default, none when max_in_flight is 1),
    runs each in its own thread (at most max_in_flight at once, in the order
    taken; a call taken ahead and past its deadline before it could start is
    not run), answers each, and reconnects
    with jittered backoff (0.2 s doubling to 30 s) while the daemon cannot be
    reached or answers 5xx, saying so through log. stop(), or setting
    stop_event, makes it take no more calls, finish and answer those in
    hand, and return. It raises WorkerRefusedError on a 401 or 403 (once the
    calls in hand are answered).

    As a context manager it runs in a thread of its own from __enter__; on
    __exit__ it stops, waits, and raises what run raised. on_call(request,
    response, seconds), when given, is called after each call ends,
    answered or (after NoAnswer) not, for a summary line."""

    def __init__(self, url: str, token: str, tools: Iterable[Tool | Mapping], *,
                 max_in_flight: int = DEFAULT_MAX_IN_FLIGHT, take_wait: float = DEFAULT_TAKE_WAIT,
                 stop_event: threading.Event | None = None, log: Callable[[str], None] | None = None,
                 on_call: Callable[[dict, dict, float], None] | None = None, ahead: int | None = None) -> None:
        u = urlsplit(url) if isinstance(url, str) else None
        if u is None or u.scheme not in ("http", "https") or not u.hostname:
            raise TypeError("connect: url is not an http(s) URL")
        if not isinstance(token, str) or not token:
            raise TypeError("connect: token is empty")
        if not isinstance(max_in_flight, int) or isinstance(max_in_flight, bool) or max_in_flight < 1:
            raise TypeError("connect: max_in_flight is not a positive integer")
        if ahead is not None and (not isinstance(ahead, int) or isinstance(ahead, bool)):
            raise TypeError("connect: ahead is not an integer")
        if not isinstance(take_wait, (int, float)) or isinstance(take_wait, bool) or take_wait <= 0:
            raise TypeError("connect: take_wait is not a positive number of seconds")
        self._url = url.rstrip("/")
        self._https = u.scheme == "https"
        self._host = u.hostname
        self._port = u.port
        self._prefix = u.path.rstrip("/")
        self._token = token
        self._max = max_in_flight
        # Calls taken before there is room to run them, so the next ones are
        # in hand when one ends (see the Go SDK's Worker.Ahead): max_in_flight
        # more by default, none at max_in_flight 1, which keeps the daemon's
        # order.
        self._ahead = max(ahead if ahead is not None else (max_in_flight if max_in_flight > 1 else 0), 0)
        self._running = 0  # calls running: at most max_in_flight
        self._turns: collections.deque[threading.Event] = collections.deque()  # calls taken ahead, in order
        self._take_wait = float(take_wait)
        self._stop = stop_event if stop_event is not None else threading.Event()
        self._log = log or _default_log
        self._on_call = on_call
        self._cond = threading.Condition()
        self._in_flight = 0
        self._calls: list[threading.Thread] = []
        self._take_conn: http.client.HTTPConnection | None = None
        # Connections answers left open, for the next answers: a new TCP
        # connection per call cost as much as the call.
        self._idle: list[http.client.HTTPConnection] = []
        self._no_answer: set[str] = set()
        self._tools: dict[str, Tool] = {}
        for t in tools if not isinstance(tools, (str, Mapping, Tool)) else [tools]:
            self._add(t if isinstance(t, Tool) else Tool(**t))
        if not self._tools:
            raise TypeError("connect: a worker needs at least one tool")
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def _add(self, tool: Tool) -> None:
        """Keeps a copy of tool whose run notes NoAnswer by call id."""
        run = tool._run

        def wrapped(value: Any, context: Mapping) -> Any:
            try:
                result = run(value, context)
                if inspect.isawaitable(result):
                    result = asyncio.run(_await(result))
                return result
            except NoAnswer:
                with self._cond:
                    self._no_answer.add(context["call_id"])
                return None  # never sent

        sig = [dict(x) for x in tool.input_signature] if tool.input_signature is not None else None
        self._tools[tool.tool_ref] = Tool(tool.tool_ref, wrapped, required_grants=list(tool.required_grants),
                                          input_signature=sig, output_type=tool.output_type, log=tool._log)

    # -- stopping

    def stop(self) -> None:
        """Takes no more calls; run returns once the calls in hand are
        answered. It returns at once."""
        self._stop.set()
        self._abort()

    def _abort(self) -> None:
        with self._cond:
            self._cond.notify_all()
            conn = self._take_conn
            if conn is not None and conn.sock is not None:
                try:
                    conn.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # already closed

    def _watch(self, done: threading.Event) -> None:
        while not done.is_set():
            if self._stop.wait(_STOP_POLL):
                self._abort()
                return

    # -- running

    def run(self) -> None:
        """Runs the worker until it is stopped (see the class)."""
        done = threading.Event()
        threading.Thread(target=self._watch, args=(done,), name="touba-worker-stop", daemon=True).start()
        try:
            self._loop()
        finally:
            done.set()
            with self._cond:
                pending = list(self._calls)
            for t in pending:
                t.join()
            with self._cond:
                idle, self._idle = self._idle, []
            for conn in idle:
                conn.close()

    def start(self) -> Worker:
        """Runs the worker in a thread of its own; join waits for it."""
        def target() -> None:
            try:
                self.run()
            except BaseException as err:  # noqa: BLE001 - raised again by join
                self._error = err

        self._thread = threading.Thread(target=target, name="touba-worker")
        self._thread.start()
        return self

    def join(self, timeout: float | None = None) -> None:
        """Waits for the worker started by start() to return, and raises
        what run raised. TimeoutError when it is still running after timeout."""
        if self._thread is None:
            raise RuntimeError("the worker was not started")
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError("the worker is still running")
        if self._error is not None:
            raise self._error

    def __enter__(self) -> Worker:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
        if exc[0] is None:
            self.join()
        elif self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        backoff = _FIRST_BACKOFF
        down = False  # the last take failed: say so when one succeeds
        refs = list(self._tools)
        while True:
            # Wait for room for at least one call, then ask for as many as
            # there is room for.
            with self._cond:
                while self._in_flight >= self._max + self._ahead and not self._stop.is_set():
                    self._cond.wait()
                if self._stop.is_set():
                    return
                room = self._max + self._ahead - self._in_flight
            try:
                calls = self._take(refs, room)
            except WorkerRefusedError:
                raise
            except Exception as err:  # noqa: BLE001 - any failure of the take is retried
                if self._stop.is_set():
                    return
                wait = backoff / 2 + random.uniform(0, backoff / 2)
                self._log(f"touba worker: cannot reach {self._url}: {_describe(err)}; retrying in {wait * 1000:.0f}ms")
                down = True
                backoff = min(backoff * 2, _MAX_BACKOFF)
                if self._stop.wait(wait):
                    return
                continue
            if down:
                down = False
                self._log(f"touba worker: connected to {self._url} again")
            backoff = _FIRST_BACKOFF
            with self._cond:
                self._calls = [t for t in self._calls if t.is_alive()]
                for call in calls:
                    self._in_flight += 1
                    # A run slot now, or a turn for one in the order taken.
                    turn = None
                    if self._running < self._max:
                        self._running += 1
                    else:
                        turn = threading.Event()
                        self._turns.append(turn)
                    t = threading.Thread(target=self._serve, args=(call, turn), name="touba-call")
                    self._calls.append(t)
                    t.start()

    def _take(self, refs: list[str], n: int) -> list:
        body = json.dumps({"tools": refs, "max": n, "wait_ms": int(self._take_wait * 1000)}).encode()
        got = p.loads(self._post("/workers/v1/take", body, self._take_wait + _TAKE_GRACE, take=True).decode("utf-8"))
        if not isinstance(got, dict) or not isinstance(got.get("calls"), list):
            raise ValueError("take answer: no calls list")
        return got["calls"]

    def _serve(self, call: Any, turn: threading.Event | None) -> None:
        """Runs one call, once its turn comes (a call taken ahead), and
        answers it. The call runs to its end even when the worker is
        stopping (a clean stop finishes the calls in hand). A call taken
        ahead whose deadline passed before it could start is not run: the
        daemon has ended it (unknown) already, and may hand it to another
        worker."""
        if turn is not None:
            turn.wait()  # the slot of the call before it is handed over
        start = time.monotonic()
        call_id = p.call_id_of(call)
        try:
            due = (call.get("context") or {}).get("deadline_unix_ms") if isinstance(call, dict) else None
            if isinstance(due, int) and due > 0 and time.time() * 1000 >= due:
                self._log(f"touba worker: call {call_id} was past its deadline before it could start; not run")
                return
            # A call for a tool this worker lacks is answered ToolRefMismatch by the first one.
            ref = call.get("tool_ref") if isinstance(call, dict) else None
            tool = self._tools.get(ref) if isinstance(ref, str) else None
            tool = tool or next(iter(self._tools.values()))
            line = tool.handle_line(json.dumps(call), persistent=True)
            with self._cond:
                skip = call_id in self._no_answer
                self._no_answer.discard(call_id)
            if not skip:
                self._answer(call, line)
            if self._on_call is not None:
                self._on_call(call, json.loads(line), time.monotonic() - start)
        except Exception:  # noqa: BLE001 - a call's failure must not end the worker
            self._log(f"touba worker: call {call_id}: {traceback.format_exc()}")
        finally:
            with self._cond:
                if self._turns:
                    self._turns.popleft().set()
                else:
                    self._running -= 1
                self._in_flight -= 1
                self._cond.notify_all()

    def _answer(self, call: dict, body: bytes) -> None:
        """Posts body, retrying while the daemon cannot be reached and the
        call's deadline has not passed; the daemon refusing it (409: the call
        timed out meanwhile) is logged."""
        call_id = p.call_id_of(call)
        due = (call.get("context") or {}).get("deadline_unix_ms")
        deadline = due / 1000 if isinstance(due, int) and due > 0 else time.time() + 60
        backoff = _FIRST_BACKOFF
        while True:
            try:
                self._post("/workers/v1/answer", body, max(0.001, deadline + 5 - time.time()))
                return
            except Exception as err:  # noqa: BLE001 - retried or logged below
                status = getattr(err, "status", 0)
                if 0 < status < 500 and status != 429:
                    self._log(f"touba worker: answer to call {call_id} refused: {err}")
                    return
                if time.time() > deadline:
                    self._log(f"touba worker: cannot answer call {call_id} before its deadline: {_describe(err)}")
                    return
            time.sleep(backoff)  # the daemon is unreachable: wait before the next try
            backoff = min(backoff * 2, _MAX_ANSWER_BACKOFF)

    def _post(self, path: str, body: bytes, timeout: float, take: bool = False) -> bytes:
        """Sends body to the daemon's path with the worker's token and returns
        the answer's body. 401 and 403 raise WorkerRefusedError. A take is
        kept where stop() can cut it short, on a connection of its own; other
        requests reuse the connections that answers left open."""
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        reused = None
        if not take:
            with self._cond:
                reused = self._idle.pop() if self._idle else None
        conn = reused or cls(self._host, self._port, timeout=timeout)
        keep = False
        try:
            if take:
                with self._cond:
                    if self._stop.is_set():
                        raise _Stopped()
                    self._take_conn = conn
            headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self._token}"}
            try:
                if reused is not None:
                    conn.timeout = timeout
                    if conn.sock is not None:
                        conn.sock.settimeout(timeout)
                conn.request("POST", self._prefix + path, body, headers)
                if take:
                    # stop() may have come before the socket existed.
                    with self._cond:
                        if self._stop.is_set():
                            raise _Stopped()
                resp = conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                if reused is None:
                    raise
                # The daemon closed the idle connection (its idle timeout)
                # before reading this request: once more on a new one.
                conn.close()
                conn = cls(self._host, self._port, timeout=timeout)
                conn.request("POST", self._prefix + path, body, headers)
                resp = conn.getresponse()
            data = resp.read()
            keep = not take and not resp.will_close
        finally:
            if take:
                with self._cond:
                    self._take_conn = None
            if keep:
                with self._cond:
                    if len(self._idle) < self._max + 2:
                        self._idle.append(conn)
                        conn = None
            if conn is not None:
                conn.close()
        if resp.status == 200:
            return data
        code = message = ""
        try:
            e = json.loads(data).get("error") or {}
            code = e.get("code") if isinstance(e.get("code"), str) else ""
            message = e.get("message") if isinstance(e.get("message"), str) else ""
        except (ValueError, AttributeError):
            pass  # not JSON (a proxy's page): the status says enough
        if resp.status in (401, 403):
            raise WorkerRefusedError(resp.status, code, message)
        raise _StatusError(resp.status, code, message)


async def _await(awaitable: Any) -> Any:
    return await awaitable


def _describe(err: BaseException) -> str:
    text = str(err)
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def connect(url: str, token: str, tools: Iterable[Tool | Mapping], *, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
            take_wait: float = DEFAULT_TAKE_WAIT, stop_event: threading.Event | None = None,
            log: Callable[[str], None] | None = None,
            on_call: Callable[[dict, dict, float], None] | None = None, ahead: int | None = None) -> None:
    """Runs a Worker of tools against the daemon at url with token until
    stop_event is set: it takes calls, runs up to max_in_flight at once,
    answers them, and reconnects with backoff while the daemon cannot be
    reached. Once stop_event is set it takes no more calls, finishes and
    answers those in hand, and returns. Raises WorkerRefusedError on a 401 or
    403, TypeError on bad arguments. Worker offers stop() and a context
    manager instead of an Event."""
    Worker(url, token, tools, max_in_flight=max_in_flight, take_wait=take_wait, stop_event=stop_event, log=log,
           on_call=on_call, ahead=ahead).run()

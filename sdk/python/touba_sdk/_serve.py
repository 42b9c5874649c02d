"""Serving a tool on a pair of binary streams in either mode of SPEC §4.1,
and define_tool, which serves on the process's stdin and stdout and exits."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any, BinaryIO

from . import _protocol as p
from ._tool import Tool, _encode_line, _failure


def serve_one(tool: Tool, stream_in: BinaryIO, stream_out: BinaryIO,
              stop_event: threading.Event | None = None) -> None:
    """Reads exactly one JSON request from stream_in, answers it and writes
    one response to stream_out. Whatever the request holds, it answers (an
    unreadable one gets HandlerProtocolError). It does not wait for
    stream_in to end once a whole document has arrived, so the host need not
    close stdin."""
    text = _read_one_document(stream_in)
    if text.strip() == b"":
        line = _encode_line(_failure(p.CODE_PROTOCOL_ERROR, "no request on stdin"))
    else:
        line = tool.handle_line(text, stop_event=stop_event)
    stream_out.write(line)
    stream_out.flush()


def _read_one_document(stream: BinaryIO) -> bytes:
    # A partial object never parses, so the first successful parse of a text
    # ending in "}" is the whole request. Parsing every time the text ends in
    # "}" would cost O(n^2) on a large request: a parse is tried when the
    # pipe paused (a short read) or the text doubled since the last try, and
    # at the end of input, which keeps the reading linear.
    read = getattr(stream, "read1", None) or stream.read
    chunks: list[bytes] = []
    total = tried = 0
    while True:
        chunk = read(65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if chunk.rstrip().endswith(b"}") and (len(chunk) < 65536 or total >= 2 * tried):
            tried = total
            buf = b"".join(chunks)
            chunks = [buf]
            try:
                p.loads(buf.decode("utf-8"))
                return buf
            except (ValueError, RecursionError):
                pass  # not whole yet (or never: the end of input decides)


# How often the waiting main thread looks at stop_event. A signal handler
# may set an Event the main thread never waits on, but not wake one it is
# waiting on (it could run while the main thread holds that Event's lock).
_STOP_POLL = 0.05


def serve_persistent(tool: Tool, stream_in: BinaryIO, stream_out: BinaryIO,
                     stop_event: threading.Event | None = None) -> None:
    """Reads one compact JSON request per line from stream_in and runs each
    call in its own thread, writing each response as one line with a
    top-level call_id, in the order calls finish. When stream_in ends it
    waits for the calls in flight and returns. When stop_event is set it
    stops reading (a read already blocked is abandoned), waits for the calls
    in flight, which see the same stop_event in their context, and returns.
    Raises OSError when stream_out or stream_in fails."""
    stop_event = stop_event or threading.Event()
    lock = threading.Lock()
    errors: list[BaseException] = []  # of writing responses
    read_errors: list[BaseException] = []
    calls: list[threading.Thread] = []
    read_done = threading.Event()
    closed: list[bool] = []  # non-empty once the main thread stopped taking calls

    def serve(line: bytes) -> None:
        resp = tool.handle_line(line, persistent=True, stop_event=stop_event)
        with lock:
            if errors:
                return
            try:
                stream_out.write(resp)
                stream_out.flush()
            except (OSError, ValueError) as err:
                errors.append(err)

    def read() -> None:
        try:
            for line in stream_in:
                if stop_event.is_set():
                    return
                if not line.strip():
                    continue
                t = threading.Thread(target=serve, args=(line,), name="touba-call")
                with lock:
                    if closed:
                        return
                    calls[:] = [c for c in calls if c.is_alive()]
                    calls.append(t)
                    t.start()
        except (OSError, ValueError) as err:
            read_errors.append(err)
        finally:
            read_done.set()

    # A daemon thread, so a read blocked on an open stdin cannot hold the
    # process once it was told to stop.
    threading.Thread(target=read, name="touba-reader", daemon=True).start()
    while not read_done.wait(_STOP_POLL):
        if stop_event.is_set():
            break
    with lock:
        # No call starts after this: every call started is joined below.
        closed.append(True)
        pending = list(calls)
    for t in pending:
        t.join()
    if errors:
        raise errors[0]
    if read_errors:
        raise OSError(f"read requests: {read_errors[0]}")


def define_tool(*, tool_ref: str, run: Callable[[Any, Mapping], Any], required_grants: list[str] | None = None,
                input_signature: list[Mapping] | None = None, output_type: str | None = None,
                log: Callable[[str], None] | None = None) -> None:
    """Checks the definition and serves it on stdin and stdout: with
    TOUBA_HANDLER_MODE=persistent one request per line, each call in its own
    thread, until stdin closes; otherwise exactly one request (SPEC §4.1),
    so one handler file works both ways. The process then exits: 0 when
    every request was answered, 1 when stdout failed; threads run left
    behind do not hold it. SIGTERM and SIGINT set context["stop_event"] of the
    calls in flight and stop reading; a second signal kills the process. One
    tool per process. An invalid definition raises TypeError before anything
    is read.

    run(input, context) is called with the request's input and a read-only
    context; it returns create_tool_result(...) or a plain value (the
    output), or raises. It may be a coroutine function (run with
    asyncio.run). In persistent mode it runs in several threads at once."""
    tool = Tool(tool_ref, run, required_grants=required_grants, input_signature=input_signature,
                output_type=output_type, log=log)
    persistent = os.environ.get(p.MODE_ENV) == "persistent"
    stop_event = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        # Back to the default action, so a second signal kills the process.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        stop_event.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    code = 0
    try:
        if persistent:
            serve_persistent(tool, sys.stdin.buffer, sys.stdout.buffer, stop_event)
        else:
            serve_one(tool, sys.stdin.buffer, sys.stdout.buffer, stop_event)
    except (OSError, ValueError) as err:
        sys.stderr.write(f"{tool_ref}: write response: {err}\n")
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        # Exit now: the host waits for the process to exit after its answer.
        os._exit(code)

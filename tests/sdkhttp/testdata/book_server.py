"""A webhook target on touba_sdk for tests/sdkhttp: the tool Book, served by
wsgi_app on POST /hook, with GET /stats counting its runs. It listens on
127.0.0.1 port 0 (a threading wsgiref server) and prints {"port": N} as its
first line. The secret comes from TOUBA_WEBHOOK_SECRET."""

import json
import os
import socketserver
import sys
import threading
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "sdk", "python"))

from touba_sdk import Tool, create_effect_receipt, create_tool_result, wsgi_app  # noqa: E402

lock = threading.Lock()
stats = {"runs": 0, "applied": 0}
booked: dict = {}  # effect_id -> booking number: the tool's own dedupe


def run(value, context):
    effect = context["effect"]
    with lock:
        stats["runs"] += 1
        if effect["effect_id"] not in booked:
            booked[effect["effect_id"]] = len(booked) + 1
            stats["applied"] += 1
        n = booked[effect["effect_id"]]
    out = {"booking": n, "invoice": value["invoice"], "idempotency_key": context["idempotency_key"], "sdk": "python"}
    return create_tool_result(out, create_effect_receipt(effect, outcome="applied", receipt_ref=f"booking:{n}"))


hook = wsgi_app(Tool("tool:sdkhttp/Book", run))


def app(environ, start_response):
    if environ.get("PATH_INFO") == "/stats":
        with lock:
            body = json.dumps(stats).encode()
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]
    return hook(environ, start_response)


class Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


server = make_server("127.0.0.1", 0, app, server_class=Server, handler_class=Quiet)
print(json.dumps({"port": server.server_port}), flush=True)
server.serve_forever()

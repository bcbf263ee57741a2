#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A small OpenAI-compatible server for the routing tests (python3 stdlib only).

Records every byte it receives (request line, headers, body) in --log, one request after
another, and answers /v1/chat/completions and /v1/completions with a Server-Sent-Events
stream. Binds to a loopback address only.

Modes:
  ok    answers --reply, or with --echo "ECHO:" followed by the request's text (the prompt, or
        the messages' contents): placeholders sent to it come back, so the daemon must restore
        them. --split N cuts the answer into N-byte SSE chunks (placeholders are split across
        chunks).
  fail  HTTP 500 with an OpenAI error body.
  hang  reads the request and answers nothing (the test kills the server, or the client
        times out).
Prints "ready PORT" on stdout once listening.
"""
import argparse
import json
import socketserver
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

ap = argparse.ArgumentParser()
ap.add_argument("--host", default="127.0.0.1")
ap.add_argument("--port", type=int, default=0)
ap.add_argument("--log", required=True)
ap.add_argument("--mode", choices=["ok", "fail", "hang"], default="ok")
ap.add_argument("--reply", default="remote answer")
ap.add_argument("--echo", action="store_true")
ap.add_argument("--split", type=int, default=0)
args = ap.parse_args()

if not args.host.startswith("127."):
    sys.exit("fake-openai: loopback addresses only")

lock = threading.Lock()


def record(data: bytes):
    with lock:
        with open(args.log, "ab") as f:
            f.write(data)
            f.write(b"\n--- end of request ---\n")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *a):
        pass

    def read_all(self) -> bytes:
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        head = (self.requestline + "\r\n" + str(self.headers)).encode("utf-8", "replace")
        record(head + body)
        return body

    def do_GET(self):
        self.read_all()
        if self.path.rstrip("/") == "/v1/models" and args.mode != "fail":
            out = json.dumps({"object": "list", "data": [{"id": "fake", "object": "model"}]})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out.encode())
        else:
            self.send_error(404 if args.mode != "fail" else 500)

    def do_POST(self):
        body = self.read_all()
        if args.mode == "hang":
            time.sleep(3600)
            return
        if args.mode == "fail":
            out = json.dumps({"error": {"message": "fake failure", "type": "server_error",
                                        "code": "internal_error"}}).encode()
            self.send_response(500)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(out)
            return
        try:
            req = json.loads(body)
        except ValueError:
            self.send_error(400)
            return
        chat = self.path.startswith("/v1/chat/completions")
        if args.echo:
            if chat:
                text = "\n".join(m.get("content", "") for m in req.get("messages", []))
            else:
                text = req.get("prompt", "")
            answer = "ECHO:" + text
        else:
            answer = args.reply
        data = answer.encode("utf-8")
        n = args.split if args.split > 0 else len(data) or 1
        # Cut at byte offsets, then keep whole characters per chunk (JSON carries text): a
        # chunk boundary falls inside a placeholder whenever it is longer than n.
        chunks, cur = [], b""
        for ch in answer:
            cur += ch.encode("utf-8")
            if len(cur) >= n:
                chunks.append(cur.decode("utf-8"))
                cur = b""
        if cur:
            chunks.append(cur.decode("utf-8"))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        for c in chunks:
            if chat:
                ev = {"object": "chat.completion.chunk",
                      "choices": [{"index": 0, "delta": {"content": c}, "finish_reason": None}]}
            else:
                ev = {"object": "text_completion",
                      "choices": [{"index": 0, "text": c, "finish_reason": None}]}
            self.wfile.write(b"data: " + json.dumps(ev).encode() + b"\n\n")
            self.wfile.flush()
        fin = {"choices": [{"index": 0, "finish_reason": "stop",
                            **({"delta": {}} if chat else {"text": ""})}],
               "usage": {"prompt_tokens": 1, "completion_tokens": len(chunks)}}
        self.wfile.write(b"data: " + json.dumps(fin).encode() + b"\n\ndata: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


class Server(socketserver.ThreadingMixIn, HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


srv = Server((args.host, args.port), Handler)
print("ready", srv.server_address[1], flush=True)
srv.serve_forever()

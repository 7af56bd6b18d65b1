"""A local OpenAI-compatible chat-completions server with injected latency and failures, for tests and benchmarks
of the ``openai`` backend (the real ``openai`` SDK talks to it over HTTP; loopback only)."""

from __future__ import annotations

import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LatencyServer:
    """A chat-completions server with injected latency (uniform in ``latency_s``) and failures: each request
    whose number is a multiple of ``fail_every`` gets ``status`` (with a ``retry-after-ms`` header, as OpenAI's
    API sends), then the client's retry succeeds. Delays are drawn from ``random.Random(seed)``, one per request in
    arrival order, so a caller can recompute them. Counts requests in flight."""

    def __init__(self, *, latency_s=(0.05, 0.1), fail_every=0, status=503, seed=0, slow=None, port: int = 0):
        self.rng = random.Random(seed)
        self.latency_s = latency_s
        self.fail_every = fail_every
        self.status = status
        self.slow = dict(slow or {})  #: prompt text -> latency of that request
        self.seen = 0
        self.finished: list[str] = []  #: prompt texts in the order their replies were sent
        self.in_flight = self.max_in_flight = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Real servers (uvicorn under vllm serve, SGLang; asyncio sets TCP_NODELAY on every TCP socket) send a
            # reply without waiting. http.server leaves Nagle's algorithm on, so a reply written as headers + body
            # waits for the client's delayed ACK: ~40 ms a request on Linux loopback, which is the server's cost,
            # not the client's (it made the 200-request benchmark read 1.28x instead of 1.08x for the bare SDK).
            disable_nagle_algorithm = True

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.seen += 1
                    n = server.seen
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    delay = server.slow.get(body["messages"][-1]["content"][-1]["text"]) or server.rng.uniform(*server.latency_s)
                try:
                    time.sleep(delay)
                    with server.lock:
                        server.finished.append(body["messages"][-1]["content"][-1]["text"])
                    if server.fail_every and n % server.fail_every == 0:
                        payload, status, headers = {"error": {"message": "overloaded"}}, server.status, {"retry-after-ms": "1"}
                    else:
                        text = body["messages"][-1]["content"][-1]["text"]
                        payload = {"id": f"c{n}", "object": "chat.completion", "created": 0, "model": body["model"],
                                   "choices": [{"index": 0, "message": {"role": "assistant", "content": "Answer: A"}, "finish_reason": "stop"}],
                                   "usage": {"prompt_tokens": len(text.split()), "completion_tokens": 2, "total_tokens": len(text.split()) + 2}}
                        status, headers = 200, {}
                    data = json.dumps(payload).encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                finally:
                    with server.lock:
                        server.in_flight -= 1

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in the calling thread (e.g. in a process of its own, as a real server runs)."""
        self.httpd.serve_forever()

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


__all__ = ["LatencyServer"]

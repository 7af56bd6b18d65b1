"""A local OpenAI-compatible chat-completions server with injected latency and failures, for tests and benchmarks
of the ``openai`` backend (the real ``openai`` SDK talks to it over HTTP; loopback only).

What it models of the real API (OpenAI's, and ``vllm serve``'s OpenAI front end):

* only ``POST {base}/chat/completions`` exists; any other path is a 404 whose body is OpenAI's
  ``{"error": {"message": "Invalid URL (POST /v1/...)", "type": "invalid_request_error", "param": null, "code": null}}``;
* with ``api_key`` set (as ``vllm serve --api-key`` or OpenAI), a request without ``Authorization: Bearer <key>``
  is a 401 with OpenAI's ``invalid_api_key`` body, which shows the key masked (``sk-abc***...xyz``), as OpenAI does;
  without ``api_key`` any key is accepted (a local server);
* errors carry OpenAI's body shape (``message``, ``type``, ``param``, ``code``); a 429 or 5xx carries
  ``retry-after-ms`` (OpenAI sends it; the SDK reads it before ``retry-after``);
* ``refuse_max_tokens``: a 400 asking for ``max_completion_tokens``, as OpenAI's reasoning models answer.
"""

from __future__ import annotations

import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: OpenAI's error bodies for the statuses this server sends (type, code, message).
ERRORS = {
    429: ("requests", "rate_limit_exceeded", "Rate limit reached for requests. Please try again later."),
    500: ("server_error", None, "The server had an error while processing your request. Sorry about that!"),
    503: ("server_error", None, "The server is overloaded or not ready yet."),
}


def error_body(status: int, message: str | None = None, *, kind: str | None = None, code: str | None = None) -> dict:
    """``{"error": {...}}`` as OpenAI's API writes it."""
    default_kind, default_code, default_message = ERRORS.get(status, ("invalid_request_error", None, f"HTTP {status}"))
    return {"error": {"message": message or default_message, "type": kind or default_kind, "param": None, "code": code or default_code}}


def masked_key(key: str) -> str:
    """A key shown the way OpenAI's 401 message shows it: first and last characters, the rest starred."""
    return key[:3] + "*" * max(len(key) - 7, 0) + key[-4:] if len(key) > 8 else "*" * len(key)


class LatencyServer:
    """A chat-completions server with injected latency (uniform in ``latency_s``) and failures: each request
    whose number is a multiple of ``fail_every``, and the first requests while ``failures`` (a list of statuses)
    lasts, get that status (with ``retry-after-ms``, as OpenAI's API sends), then the client's retry succeeds.
    Delays are drawn from ``random.Random(seed)``, one per request in arrival order, so a caller can recompute
    them. Counts requests in flight; keeps every accepted request body (``bodies``) and every status sent
    (``statuses``)."""

    def __init__(self, *, latency_s=(0.05, 0.1), fail_every=0, status=503, failures=(), seed=0, slow=None, answer="Answer: A",
                 api_key: str | None = None, refuse_max_tokens=False, retry_after_ms="1", port: int = 0):
        self.rng = random.Random(seed)
        self.latency_s = latency_s
        self.fail_every = fail_every
        self.status = status
        self.failures = list(failures)
        self.slow = dict(slow or {})  #: prompt text -> latency of that request
        self.answer = answer
        self.api_key = api_key
        self.refuse_max_tokens = refuse_max_tokens
        self.retry_after_ms = retry_after_ms
        self.seen = 0
        self.finished: list[str] = []  #: prompt texts in the order their replies were sent
        self.bodies: list[dict] = []  #: bodies of the requests answered
        self.statuses: list[int] = []  #: every status sent, in order
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
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                text = prompt_of(body)
                with server.lock:
                    server.seen += 1
                    n = server.seen
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    delay = server.slow.get(text) or server.rng.uniform(*server.latency_s)
                try:
                    time.sleep(delay)
                    with server.lock:
                        server.finished.append(text)
                    self.reply(*server.answer_for(self.path, self.headers.get("Authorization"), body, text, n))
                finally:
                    with server.lock:
                        server.in_flight -= 1

            def reply(self, status: int, payload: dict, headers: dict) -> None:
                with server.lock:
                    server.statuses.append(status)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def answer_for(self, path: str, authorization: str | None, body: dict, text: str, n: int) -> tuple[int, dict, dict]:
        """(status, JSON body, headers) of the reply to request number ``n``."""
        if path.split("?", 1)[0] != "/v1/chat/completions":
            return 404, error_body(404, f"Invalid URL (POST {path})"), {}
        if self.api_key is not None and authorization != f"Bearer {self.api_key}":
            given = (authorization or "").removeprefix("Bearer ")
            message = (f"Incorrect API key provided: {masked_key(given)}. You can find your API key at https://platform.openai.com/account/api-keys."
                       if given else "You didn't provide an API key.")
            return 401, error_body(401, message, code="invalid_api_key"), {}
        with self.lock:
            failure = self.failures.pop(0) if self.failures else None
        if failure is None and self.fail_every and n % self.fail_every == 0:
            failure = self.status
        if failure:
            return failure, error_body(failure), {"retry-after-ms": self.retry_after_ms}
        if self.refuse_max_tokens and "max_tokens" in body:
            return 400, error_body(400, "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
                                   code="unsupported_parameter"), {}
        with self.lock:
            self.bodies.append(body)
        payload = {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": 0, "model": body["model"],
                   "choices": [{"index": 0, "message": {"role": "assistant", "content": self.answer}, "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": len(text.split()), "completion_tokens": len(self.answer.split()),
                             "total_tokens": len(text.split()) + len(self.answer.split())}}
        return 200, payload, {}

    def __enter__(self):
        self.thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in the calling thread (e.g. in a process of its own, as a real server runs)."""
        self.httpd.serve_forever()

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def prompt_of(body: dict) -> str:
    """The text of the last message (its last text part), or "" for a body without messages."""
    messages = body.get("messages") or [{}]
    content = messages[-1].get("content") or ""
    if isinstance(content, str):
        return content
    texts = [part.get("text", "") for part in content if part.get("type") == "text"]
    return texts[-1] if texts else ""


__all__ = ["LatencyServer", "error_body"]

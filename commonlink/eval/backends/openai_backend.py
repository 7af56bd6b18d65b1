"""Any OpenAI-compatible chat-completions server (OpenAI, vLLM serve, SGLang, TGI, LiteLLM, ...).

Images travel as ``data:`` URLs inside ``image_url`` parts. Requests run on one pool of ``concurrency``
worker threads kept for the whole run, so at most that many are in flight and a slow request holds up only
its own slot (a run's batch is large: ``16 x concurrency`` requests by default). Retries are the OpenAI SDK's
own (``max_retries``; exponential backoff with jitter, the server's ``Retry-After`` honoured; 408/409/429/5xx
and dropped connections); a request still failing after them stops the run (finished rows are cached, so a
rerun continues), as do a refused key and an unknown model; other refusals (HTTP 400) skip that row only. Token counts (and a cost, when ``price_input_per_mtok`` /
``price_output_per_mtok`` are given) of the requests this run sent are in ``backend_details.usage``.

The API key is read from an environment variable (default ``OPENAI_API_KEY``) and never printed, logged or
written to results; error texts are scrubbed of it. Each request is independent, so batch size cannot change
outputs (``batch_invariant``); the server may still be nondeterministic on its own.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from commonlink.errors import BackendError, InputError, MissingDependencyError
from commonlink.eval.backends.base import (
    BackendInfo,
    GenerationRequest,
    GenerationSettings,
    RequestFailure,
    chat_messages,
)
from commonlink.eval.imaging import image_data_url
from commonlink.redact import redact_url

log = logging.getLogger(__name__)


def sdk_retries(status: int) -> bool:
    """Whether the SDK retries a reply with this status (openai._base_client.BaseClient._should_retry: 408, 409,
    429 and every 5xx, unless the server says otherwise with ``x-should-retry``), besides dropped connections."""
    return status in (408, 409, 429) or status >= 500


def retries_taken(response, default: int) -> int:
    """How often the SDK retried the request of ``response``: the ``x-stainless-retry-count`` header it sends with
    every attempt. Fewer than ``max_retries`` when the server said ``x-should-retry: false`` or asked for a wait
    over the SDK's limit (2 minutes), so an error must not claim every retry was made."""
    try:
        return int(response.request.headers.get("x-stainless-retry-count", default))
    except (AttributeError, RuntimeError, ValueError):  # no request attached (httpx raises RuntimeError)
        return default


DEFAULT_BASE_URL = "https://api.openai.com/v1"


def _check_key_variable(api_key_env: str) -> None:
    """``api_key_env`` must be a variable *name*: a pasted key would otherwise be written to results.json."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", api_key_env or ""):
        raise InputError(
            "api_key_env must name an environment variable (letters, digits, _), and the value given is not such a name "
            "(not shown: it may be the key itself).",
            "Put the key in a variable (export OPENAI_API_KEY=...) and pass its name: --backend-arg api_key_env=OPENAI_API_KEY.",
        )


def planned_info(model: str, *, base_url: str | None = None, concurrency: int = 8, image_format: str = "png",
                 api_key_env: str = "OPENAI_API_KEY", **_) -> BackendInfo:
    """What the backend will report, known without connecting (for cache keys)."""
    _check_key_variable(api_key_env)
    return BackendInfo(backend="openai", model=model, fingerprint=f"openai:{redact_url(base_url or DEFAULT_BASE_URL)}:{model}", batch_invariant=True,
                       default_batch_size=max(64, 16 * concurrency), output_options={} if image_format == "png" else {"image_format": image_format})


class OpenAIBackend:
    planned_info = staticmethod(planned_info)

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        concurrency: int = 8,
        max_retries: int = 6,
        timeout_s: float = 600.0,
        image_format: str = "png",
        price_input_per_mtok: float | None = None,
        price_output_per_mtok: float | None = None,
    ):
        try:
            import openai
        except ImportError as exc:
            raise MissingDependencyError("openai", "eval", "The openai backend") from exc
        if concurrency < 1:
            raise InputError(f"--concurrency {concurrency} must be at least 1.", "e.g. --concurrency 8.")
        if max_retries < 0:
            raise InputError(f"--backend-arg max_retries={max_retries} must be >= 0.", "e.g. --backend-arg max_retries=6.")
        _check_key_variable(api_key_env)
        key = os.environ.get(api_key_env)
        self._secret = key or ""
        self._openai = openai
        self._lock = threading.Lock()
        self.retries = 0  #: retryable error replies seen (each is retried by the SDK while retries remain)
        http_client_class = getattr(openai, "DefaultHttpx2Client", None) or openai.DefaultHttpxClient
        self.client = openai.OpenAI(
            api_key=key or "EMPTY",  # local servers (vllm serve) accept any key
            base_url=base_url,
            max_retries=max_retries,
            timeout=timeout_s,
            http_client=http_client_class(timeout=timeout_s, event_hooks={"response": [self._count_retryable]}),
        )
        self.concurrency = concurrency
        self.max_retries = max_retries
        self.image_format = image_format
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="commonlink-openai")
        self._length_param = "max_tokens"  # what every OpenAI-compatible server knows; see _one for the newer name
        self.generate_seconds = 0.0
        self.usage = {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0, "failed_requests": 0}
        self.prices = (price_input_per_mtok, price_output_per_mtok)
        if self.prices != (None, None):
            self.usage["cost_usd"] = 0.0
        self.info = planned_info(model, base_url=base_url, concurrency=concurrency, image_format=image_format)
        self.info.details.update({
                "base_url": redact_url(base_url or DEFAULT_BASE_URL),
                "api_key": f"from ${api_key_env}" if key else f"none (${api_key_env} not set)",
                "concurrency": concurrency,
                "max_retries": max_retries,
                "retry": "openai SDK (exponential backoff with jitter, Retry-After honoured)",
                "image_format": image_format,
                "usage": self.usage,
            })

    def _count_retryable(self, response) -> None:
        if sdk_retries(response.status_code):
            with self._lock:
                self.retries += 1

    def _scrub(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text

    def _messages(self, request: GenerationRequest, settings: GenerationSettings) -> list[dict]:
        return chat_messages(request, settings, lambda img: {"type": "image_url", "image_url": {"url": image_data_url(img, self.image_format)}})

    def _count(self, usage) -> None:
        with self._lock:
            self.usage["requests"] += 1
            if usage is None:
                return
            prompt, completion = int(getattr(usage, "prompt_tokens", 0) or 0), int(getattr(usage, "completion_tokens", 0) or 0)
            self.usage["prompt_tokens"] += prompt
            self.usage["completion_tokens"] += completion
            if "cost_usd" in self.usage:
                price_in, price_out = (p or 0.0 for p in self.prices)
                self.usage["cost_usd"] = round(self.usage["cost_usd"] + (prompt * price_in + completion * price_out) / 1e6, 6)

    def _one(self, request: GenerationRequest, settings: GenerationSettings) -> str | RequestFailure:
        openai = self._openai
        kwargs = dict(model=self.info.model, messages=self._messages(request, settings), temperature=settings.temperature)
        if not settings.greedy:
            kwargs.update(top_p=settings.top_p, seed=settings.seed)
        if settings.extra:
            kwargs["extra_body"] = dict(settings.extra)  # server-specific fields (top_k, repetition_penalty, ...)
        while True:
            length_param = self._length_param
            try:
                reply = self.client.chat.completions.create(**kwargs, **{length_param: settings.max_new_tokens})
            except openai.APIStatusError as exc:
                status = exc.status_code
                if status in (401, 403):
                    raise BackendError(
                        f"The server refused the API key (HTTP {status}).",
                        "Check the key in the environment variable named by --backend-arg api_key_env and the base_url.",
                    ) from None
                if status == 400 and length_param == "max_tokens" and "max_completion_tokens" in str(exc):
                    # Newer OpenAI models refuse max_tokens and ask for max_completion_tokens: switch once, for good.
                    self._length_param = "max_completion_tokens"
                    continue
                if status == 404:
                    raise BackendError(
                        f"HTTP 404 from the server: {self._scrub(str(exc))[:300]}",
                        "Check --model (the server's model name) and base_url (it usually ends in /v1).",
                    ) from None
                if sdk_retries(status):
                    raise BackendError(
                        f"HTTP {status} from the server for {request.id}, still after {retries_taken(exc.response, self.max_retries)} retries: "
                        f"{self._scrub(str(exc))[:300]}",
                        "The server is down or overloaded; rerun later (finished rows are cached), lower --concurrency, or raise "
                        "--backend-arg max_retries.",
                    ) from None
                with self._lock:
                    self.usage["failed_requests"] += 1
                log.warning("HTTP %s for %s: skipped", status, request.id)
                return RequestFailure(f"HTTP {status}: {self._scrub(str(exc))[:300]}")
            except openai.APIConnectionError as exc:
                raise BackendError(
                    f"No connection to the server for {request.id}, still after {self.max_retries} retries: {self._scrub(str(exc))[:300]}",
                    "Check base_url and that the server is up; rerun (finished rows are cached).",
                ) from None
            self._count(getattr(reply, "usage", None))
            if not reply.choices:
                return RequestFailure("the server returned no choices")
            return reply.choices[0].message.content or ""

    def generate(self, requests: Sequence[GenerationRequest], settings: GenerationSettings) -> list[str | RequestFailure]:
        start = time.perf_counter()
        try:
            futures = [self._pool.submit(self._one, r, settings) for r in requests]
            return [f.result() for f in futures]
        finally:
            self.generate_seconds += time.perf_counter() - start

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.client.close()

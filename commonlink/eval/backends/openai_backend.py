"""Any OpenAI-compatible chat-completions server (OpenAI, vLLM serve, SGLang, TGI, LiteLLM, ...).

Images travel as ``data:`` URLs inside ``image_url`` parts; requests of a batch run concurrently (bounded by
``concurrency``); 429 and 5xx replies and dropped connections are retried with exponential backoff (the
server's ``Retry-After`` wins when given). The API key is read from an environment variable (default
``OPENAI_API_KEY``) and never printed, logged or written to results; error texts are scrubbed of it.

Each request is independent, so batch size cannot change outputs (``batch_invariant``); the server may still
be nondeterministic on its own.
"""

from __future__ import annotations

import logging
import os
import random
import re
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from commonlink.errors import BackendError, InputError, MissingDependencyError
from commonlink.eval.backends.base import (
    BackendInfo,
    GenerationRequest,
    GenerationSettings,
    RequestFailure,
    message_parts,
)
from commonlink.eval.imaging import image_data_url
from commonlink.redact import redact_url

log = logging.getLogger(__name__)

RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}


DEFAULT_BASE_URL = "https://api.openai.com/v1"


def _check_key_variable(api_key_env: str) -> None:
    """``api_key_env`` must be a variable *name*: a pasted key would otherwise be written to results.json."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", api_key_env or ""):
        raise InputError(
            "--api-key-env must name an environment variable (letters, digits, _), and the value given is not such a name "
            "(not shown: it may be the key itself).",
            "Put the key in a variable (export OPENAI_API_KEY=...) and pass its name: --api-key-env OPENAI_API_KEY.",
        )


def _redacted_url(url: str) -> str:
    """``url`` without what may be a credential (``user:password@``, query values), for result files and keys."""
    return redact_url(url)


def planned_info(model: str, *, base_url: str | None = None, concurrency: int = 8, image_format: str = "png",
                 api_key_env: str = "OPENAI_API_KEY", **_) -> BackendInfo:
    """What the backend will report, known without connecting (for cache keys)."""
    _check_key_variable(api_key_env)
    return BackendInfo(backend="openai", model=model, fingerprint=f"openai:{_redacted_url(base_url or DEFAULT_BASE_URL)}:{model}", batch_invariant=True,
                       default_batch_size=concurrency * 4, output_options={} if image_format == "png" else {"image_format": image_format})


class OpenAIBackend:
    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        concurrency: int = 8,
        max_retries: int = 6,
        backoff_s: float = 1.0,
        max_backoff_s: float = 60.0,
        timeout_s: float = 600.0,
        image_format: str = "png",
    ):
        try:
            import openai
        except ImportError as exc:
            raise MissingDependencyError("openai", "eval", "The openai backend") from exc
        if concurrency < 1:
            raise InputError(f"--concurrency {concurrency} must be at least 1.", "e.g. --concurrency 8.")
        _check_key_variable(api_key_env)
        key = os.environ.get(api_key_env)
        self._secret = key or ""
        self._openai = openai
        # Our own retry loop (below) so that backoff is visible in logs and failures name the request.
        self.client = openai.OpenAI(
            api_key=key or "EMPTY",  # local servers (vllm serve) accept any key
            base_url=base_url,
            max_retries=0,
            timeout=timeout_s,
        )
        self.concurrency = concurrency
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.image_format = image_format
        self.retries = 0
        self._length_param = "max_tokens"  # what every OpenAI-compatible server knows; see _one for the newer name
        self.generate_seconds = 0.0
        self.info = planned_info(model, base_url=base_url, concurrency=concurrency, image_format=image_format)
        self.info.details.update({
                "base_url": _redacted_url(base_url or DEFAULT_BASE_URL),
                "api_key": f"from ${api_key_env}" if key else f"none (${api_key_env} not set)",
                "concurrency": concurrency,
                "max_retries": max_retries,
                "image_format": image_format,
            })

    def _scrub(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text

    def _messages(self, request: GenerationRequest) -> list[dict]:
        content = []
        for kind, value in message_parts(request):
            if kind == "image":
                content.append({"type": "image_url", "image_url": {"url": image_data_url(value, self.image_format)}})
            else:
                content.append({"type": "text", "text": value})
        return [{"role": "user", "content": content}]

    def _one(self, request: GenerationRequest, settings: GenerationSettings) -> str | RequestFailure:
        openai = self._openai
        messages = self._messages(request)
        kwargs = dict(model=self.info.model, messages=messages, temperature=settings.temperature)
        kwargs[self._length_param] = settings.max_new_tokens
        if not settings.greedy:
            kwargs.update(top_p=settings.top_p, seed=settings.seed)
        attempt = 0
        while True:
            try:
                reply = self.client.chat.completions.create(**kwargs)
                if not reply.choices:
                    return RequestFailure("the server returned no choices")
                return reply.choices[0].message.content or ""
            except (openai.APIConnectionError, openai.APIStatusError) as exc:
                status = getattr(exc, "status_code", None)
                retryable = status is None or status in RETRY_STATUS or status >= 500
                if isinstance(exc, openai.APIStatusError) and status in (401, 403):
                    raise BackendError(
                        f"The server refused the API key (HTTP {status}).",
                        "Check the key in the environment variable named by --api-key-env and the --base-url.",
                    ) from None
                if status == 400 and "max_tokens" in kwargs and "max_completion_tokens" in str(exc):
                    # Newer OpenAI models refuse max_tokens and ask for max_completion_tokens: switch once, for good.
                    self._length_param = "max_completion_tokens"
                    kwargs[self._length_param] = kwargs.pop("max_tokens")
                    continue
                if not retryable:
                    if status == 404:
                        raise BackendError(
                            f"HTTP 404 from the server: {self._scrub(str(exc))[:300]}",
                            "Check --model (the server's model name) and --base-url (it usually ends in /v1).",
                        ) from None
                    return RequestFailure(f"HTTP {status}: {self._scrub(str(exc))[:300]}")
                if attempt >= self.max_retries:
                    what = f"HTTP {status}" if status else "connection error"
                    raise BackendError(
                        f"{what} from the server for {request.id} after {attempt + 1} attempts: {self._scrub(str(exc))[:300]}",
                        "The server is down or overloaded; rerun later (finished rows are cached), or lower --concurrency.",
                    ) from None
                delay = min(self.max_backoff_s, self.backoff_s * 2**attempt) * (1 + 0.1 * random.random())
                retry_after = _retry_after(exc)
                if retry_after is not None:
                    delay = min(self.max_backoff_s, retry_after)
                log.warning("%s for %s; retry %d in %.1fs", f"HTTP {status}" if status else "connection error", request.id, attempt + 1, delay)
                self.retries += 1
                attempt += 1
                time.sleep(delay)

    def generate(self, requests: Sequence[GenerationRequest], settings: GenerationSettings) -> list[str | RequestFailure]:
        start = time.perf_counter()
        try:
            if self.concurrency == 1 or len(requests) == 1:
                return [self._one(r, settings) for r in requests]
            with ThreadPoolExecutor(max_workers=min(self.concurrency, len(requests))) as pool:
                return list(pool.map(lambda r: self._one(r, settings), requests))
        finally:
            self.generate_seconds += time.perf_counter() - start

    def close(self) -> None:
        self.client.close()


def _retry_after(exc: Exception) -> float | None:
    response = getattr(exc, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None

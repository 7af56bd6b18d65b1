"""Any OpenAI-compatible chat-completions server (OpenAI, vLLM serve, SGLang, TGI, LiteLLM, ...).

Images travel as ``data:`` URLs inside ``image_url`` parts. Requests run on one pool of ``concurrency``
worker threads kept for the whole run, so at most that many are in flight and a slow request holds up only
its own slot (a run's batch is large: ``16 x concurrency`` requests by default). Retries are the OpenAI SDK's
own (``max_retries``; exponential backoff with jitter, the server's ``Retry-After`` honoured; 408/409/429/5xx
and dropped connections); a request still failing after them stops the run (finished rows are cached, so a
rerun continues), as do a refused key, an unknown model and a refused request parameter (a 400 whose ``param`` is
one we send: it would refuse every row); other refusals (HTTP 400) skip that row only.

Per-model request rules: OpenAI's reasoning models (o-series, gpt-5; :func:`is_reasoning_model`, or
``reasoning=true``) refuse ``max_tokens`` (they take ``max_completion_tokens``), any ``temperature`` but the
default 1, and ``top_p``, each with a 400 naming ``param``; for them we send ``max_completion_tokens`` and neither
(they sample at temperature 1 whatever is asked; ``backend_details.request_rules`` says so). Token counts (and a
cost, when ``price_input_per_mtok`` / ``price_output_per_mtok`` are given) of the requests this run sent are in
``backend_details.usage``.

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
from commonlink.redact import redact_text, redact_url

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
#: Refusals (HTTP 400) in a row, with no request answered, after which a run stops: every row would be refused alike.
SYSTEMIC_REFUSALS = 32


def api_message(exc) -> str:
    """The API's own error message (``error.message`` of the body), else the SDK's text."""
    body = getattr(exc, "body", None)
    message = body.get("message") if isinstance(body, dict) else None
    return str(message) if message else str(exc)


#: OpenAI's reasoning models by name (an optional provider prefix, then o1, o3-mini, o4-mini, gpt-5, gpt-5.1-mini, ...).
_REASONING_NAME = re.compile(r"^(?:[\w.-]+/)?(?:o\d+|gpt-5)(?:[-.:_]|$)", re.IGNORECASE)
#: Request parameters we set; a 400 naming one of them would refuse every request alike.
_OUR_PARAMS = ("max_tokens", "max_completion_tokens", "temperature", "top_p", "seed")


def is_reasoning_model(model: str) -> bool:
    """Whether ``model`` names one of OpenAI's reasoning models, which take only their default sampling settings."""
    return bool(_REASONING_NAME.match(model))


def request_rules(reasoning: bool) -> str:
    if reasoning:
        return (
            "reasoning model: max_completion_tokens; temperature and top_p not sent (the API takes only the default, "
            "temperature 1), so outputs are sampled even with --temperature 0"
        )
    return "chat model: max_tokens (max_completion_tokens when the server asks), temperature, top_p and seed as set"


def _check_key_variable(api_key_env: str) -> None:
    """``api_key_env`` must be a variable *name*: a pasted key would otherwise be written to results.json."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", api_key_env or ""):
        raise InputError(
            "api_key_env must name an environment variable (letters, digits, _), and the value given is not such a "
            "name "
            "(not shown: it may be the key itself).",
            "Put the key in a variable (export OPENAI_API_KEY=...) and pass its name: --backend-arg "
            "api_key_env=OPENAI_API_KEY.",
        )


def planned_info(
    model: str,
    *,
    base_url: str | None = None,
    concurrency: int = 8,
    image_format: str = "png",
    api_key_env: str = "OPENAI_API_KEY",
    reasoning: bool | None = None,
    **_,
) -> BackendInfo:
    """What the backend will report, known without connecting (for cache keys)."""
    _check_key_variable(api_key_env)
    options: dict = {} if image_format == "png" else {"image_format": image_format}
    if is_reasoning_model(model) if reasoning is None else reasoning:
        options["request_rules"] = "reasoning"  # what is sent differs (no temperature): not the same outputs
    return BackendInfo(
        backend="openai",
        model=model,
        fingerprint=f"openai:{redact_url(base_url or DEFAULT_BASE_URL)}:{model}",
        batch_invariant=True,
        default_batch_size=max(64, 16 * concurrency),
        output_options=options,
    )


def settings_not_sent(info: BackendInfo, settings: GenerationSettings) -> dict[str, dict]:
    """The generation settings this model's request rules do not send: ``{name: {"asked", "sent", "why"}}``
    (``sent`` None: left out of the request). A reasoning model gets no temperature and no top_p: it samples at
    its default temperature 1, whatever was asked."""
    if info.output_options.get("request_rules") != "reasoning":
        return {}
    why = "reasoning model: the API takes only its default (temperature 1, no nucleus cut), so it is not sent"
    out = {"temperature": {"asked": settings.temperature, "sent": None, "why": why}}
    if settings.top_p != 1:
        out["top_p"] = {"asked": settings.top_p, "sent": None, "why": why}
    return out


class OpenAIBackend:
    planned_info = staticmethod(planned_info)
    #: generation settings the request rules drop for a model (recorded in results.json, warned about at start)
    not_sent_rules = staticmethod(settings_not_sent)

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
        reasoning: bool | None = None,
    ):
        try:
            import openai
        except ImportError as exc:
            raise MissingDependencyError("openai", "eval", "The openai backend") from exc
        if concurrency < 1:
            raise InputError(f"--concurrency {concurrency} must be at least 1.", "e.g. --concurrency 8.")
        if max_retries < 0:
            raise InputError(
                f"--backend-arg max_retries={max_retries} must be >= 0.", "e.g. --backend-arg max_retries=6."
            )
        _check_key_variable(api_key_env)
        key = os.environ.get(api_key_env)
        if not key and base_url is None:  # the SDK would retry "Connection error" for minutes, naming neither
            raise BackendError(
                f"No API key for {DEFAULT_BASE_URL}: the environment variable ${api_key_env} is not set (and no "
                "base_url was given, so requests would go to OpenAI).",
                f"export {api_key_env}=... (your key), or for a local OpenAI-compatible server pass its address: "
                "--backend-arg base_url=http://127.0.0.1:8000/v1 (local servers accept any key).",
            )
        self._endpoint = redact_url(base_url or DEFAULT_BASE_URL)
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
        #: None: from the model's name. Reasoning models get their own request rules (see the module's docstring).
        self.reasoning = is_reasoning_model(model) if reasoning is None else bool(reasoning)
        # max_tokens: what every OpenAI-compatible server knows; see _one for the newer name.
        self._length_param = "max_completion_tokens" if self.reasoning else "max_tokens"
        self.generate_seconds = 0.0
        self.usage = {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0, "failed_requests": 0}
        self.prices = (price_input_per_mtok, price_output_per_mtok)
        if self.prices != (None, None):
            self.usage["cost_usd"] = 0.0
        self.info = planned_info(
            model, base_url=base_url, concurrency=concurrency, image_format=image_format, reasoning=self.reasoning
        )
        self.info.details.update(
            {
                "base_url": redact_url(base_url or DEFAULT_BASE_URL),
                "api_key": f"from ${api_key_env}" if key else f"none (${api_key_env} not set)",
                "concurrency": concurrency,
                "max_retries": max_retries,
                "retry": "openai SDK (exponential backoff with jitter, Retry-After honoured)",
                "image_format": image_format,
                "request_rules": request_rules(self.reasoning),
                "usage": self.usage,
            }
        )

    def _count_retryable(self, response) -> None:
        if sdk_retries(response.status_code):
            with self._lock:
                self.retries += 1

    def _scrub(self, text: str) -> str:
        return redact_text(text, (self._secret,))  # the key, Authorization echoes, token shapes, URL credentials

    def _messages(self, request: GenerationRequest, settings: GenerationSettings) -> list[dict]:
        return chat_messages(
            request,
            settings,
            lambda img: {"type": "image_url", "image_url": {"url": image_data_url(img, self.image_format)}},
        )

    def _count(self, usage) -> None:
        with self._lock:
            self.usage["requests"] += 1
            if usage is None:
                return
            prompt, completion = (
                int(getattr(usage, "prompt_tokens", 0) or 0),
                int(getattr(usage, "completion_tokens", 0) or 0),
            )
            self.usage["prompt_tokens"] += prompt
            self.usage["completion_tokens"] += completion
            if "cost_usd" in self.usage:
                price_in, price_out = (p or 0.0 for p in self.prices)
                self.usage["cost_usd"] = round(
                    self.usage["cost_usd"] + (prompt * price_in + completion * price_out) / 1e6, 6
                )

    def _one(self, request: GenerationRequest, settings: GenerationSettings) -> str | RequestFailure:
        openai = self._openai
        kwargs = dict(model=self.info.model, messages=self._messages(request, settings))
        if not self.reasoning:
            kwargs["temperature"] = settings.temperature
            if not settings.greedy:
                kwargs.update(top_p=settings.top_p)
        if not settings.greedy:
            kwargs.update(seed=settings.seed)
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
                        "Check the key in the environment variable named by --backend-arg api_key_env "
                        "and the base_url.",
                    ) from None
                if status == 400 and length_param == "max_tokens" and "max_completion_tokens" in str(exc):
                    # Newer OpenAI models refuse max_tokens and ask for max_completion_tokens: switch once, for good.
                    self._length_param = "max_completion_tokens"
                    continue
                if status == 400 and getattr(exc, "param", None) in _OUR_PARAMS:
                    raise self._refused_parameter(exc) from None
                if status == 404:
                    raise BackendError(
                        f"HTTP 404 from the server: {self._scrub(str(exc))[:300]}",
                        "Check --model (the server's model name) and base_url (it usually ends in /v1).",
                    ) from None
                if sdk_retries(status):
                    raise BackendError(
                        f"HTTP {status} from the server for {request.id}, still after "
                        f"{retries_taken(exc.response, self.max_retries)} retries: "
                        f"{self._scrub(str(exc))[:300]}",
                        "The server is down or overloaded; rerun later (finished rows are cached), lower "
                        "--concurrency, or raise "
                        "--backend-arg max_retries.",
                    ) from None
                reason = f"HTTP {status}: {self._scrub(api_message(exc))[:300]}"
                with self._lock:
                    self.usage["failed_requests"] += 1
                    refused_all = self.usage["requests"] == 0 and self.usage["failed_requests"] >= SYSTEMIC_REFUSALS
                if refused_all:  # the same refusal for every row: stop before sending the whole dataset
                    raise BackendError(
                        f"The server refused the first {SYSTEMIC_REFUSALS} requests and answered none; the last: "
                        f"{reason}",
                        "Fix what the server's reason names (model, images, parameters) and rerun; finished rows are "
                        "cached.",
                    ) from None
                log.warning("HTTP %s for %s: skipped", status, request.id)
                return RequestFailure(reason)
            except openai.APIConnectionError as exc:
                raise BackendError(
                    f"No connection to {self._endpoint} for {request.id}, still after {self.max_retries} retries: "
                    f"{self._scrub(str(exc))[:300]}",
                    "Check base_url (--backend-arg base_url=...) and that the server is up; rerun (finished rows are "
                    "cached).",
                ) from None
            self._count(getattr(reply, "usage", None))
            if not reply.choices:
                return RequestFailure("the server returned no choices")
            return reply.choices[0].message.content or ""

    def _refused_parameter(self, exc) -> BackendError:
        """The API refused a request parameter we set: every request would be refused alike."""
        param = exc.param
        if param in ("temperature", "top_p") and not self.reasoning:
            fix = (
                f"If {self.info.model} is a reasoning model (o-series, gpt-5, or a deployment of one), add "
                "--backend-arg reasoning=true (sends max_completion_tokens, no temperature or top_p); otherwise change "
                f"--{param.replace('_', '-')} to a value the model takes."
            )
        elif param in ("temperature", "top_p", "max_completion_tokens") and self.reasoning:
            fix = (
                f"{self.info.model} does not follow OpenAI's reasoning-model rules: add --backend-arg reasoning=false."
            )
        else:
            fix = (
                "Check the model's documented request parameters; "
                f"--gen-arg/--backend-arg set what commonlink sends ({param})."
            )
        return BackendError(
            f"The server refused the request parameter {param} for the model {self.info.model} "
            f"(HTTP 400 {getattr(exc, 'code', None) or ''}): {self._scrub(api_message(exc))[:300]}",
            fix,
        )

    def generate(
        self, requests: Sequence[GenerationRequest], settings: GenerationSettings
    ) -> list[str | RequestFailure]:
        start = time.perf_counter()
        try:
            futures = [self._pool.submit(self._one, r, settings) for r in requests]
            return [f.result() for f in futures]
        finally:
            self.generate_seconds += time.perf_counter() - start

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.client.close()

"""A stand-in for the ``vllm`` package, mirroring the API of the real one recorded in ``data/vllm_api.json``.

vLLM cannot be installed next to the toolkit's torch and cannot run without a GPU, so tests put this module in
``sys.modules["vllm"]`` and run the real :mod:`commonlink.eval.backends.vllm_backend` code against it. What it
mirrors, from the real wheel's source (``scripts/record_vllm_api.py`` records it; a test checks that the
signatures below equal the recording, default values included):

* ``LLM(model, *, ...)`` with the same parameters; extra keyword arguments must be ``EngineArgs`` fields, as in
  vLLM (``EngineArgs(**kwargs)`` raises ``TypeError`` on any other);
* ``LLM.chat(messages, sampling_params, ...)``: one conversation or a list of them; content parts of the types
  vLLM's chat parser knows; more images in one prompt than ``limit_mm_per_prompt`` allows raises vLLM's
  ``VLLMValidationError`` with its exact text (vLLM's default limit is 999 per modality);
* ``SamplingParams`` with the same fields and defaults (an unknown field is a ``TypeError``, as msgspec raises) and
  the value checks of its ``_verify_args`` that settings can reach (``VLLMValidationError``, its texts);
* ``RequestOutput``/``CompletionOutput`` with the attributes the backend reads (``outputs[0].text``,
  ``token_ids``, ``prompt_token_ids``).

It does not run a model: ``responder(conversation, sampling_params) -> str`` makes each answer (default: a
fixed text), so protocol code can be exercised end to end. Every ``LLM`` made and every ``chat`` call is kept
in ``INSTANCES`` / ``instance.calls`` for assertions.
"""

from __future__ import annotations

import enum
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

RECORDED = json.loads((Path(__file__).parent / "data" / "vllm_api.json").read_text(encoding="utf-8"))
__version__ = RECORDED["vllm_version"]

IMAGE_PART_TYPES = ("image_pil", "image_url", "input_image", "image_embeds")
INSTANCES: list[LLM] = []


def default_responder(conversation, sampling_params) -> str:
    return "Answer: A"


responder = default_responder


class VLLMValidationError(Exception):
    """vllm.exceptions.VLLMValidationError (a VLLMClientError; not a ValueError)."""

    def __init__(self, message: str, *, parameter: str | None = None, value=None):
        super().__init__(message)
        self.parameter = parameter
        self.value = value


class RequestOutputKind(enum.Enum):
    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


class SamplingParams:
    """vllm.SamplingParams: keyword fields with vLLM's defaults (a msgspec Struct there)."""

    n: object = 1
    presence_penalty: object = 0.0
    frequency_penalty: object = 0.0
    repetition_penalty: object = 1.0
    temperature: object = 1.0
    watermarking: object = None
    top_p: object = 1.0
    top_k: object = 0
    min_p: object = 0.0
    seed: object = None
    stop: object = None
    stop_token_ids: object = None
    ignore_eos: object = False
    max_tokens: object = 16
    min_tokens: object = 0
    logprobs: object = None
    prompt_logprobs: object = None
    prompt_logprob_token_ids: object = None
    prompt_logprob_start: object = None
    logprob_token_ids: object = None
    flat_logprobs: object = False
    detokenize: object = True
    skip_special_tokens: object = True
    spaces_between_special_tokens: object = True
    include_stop_str_in_output: object = False
    output_kind: object = RequestOutputKind.CUMULATIVE
    stream_interval: object = None
    skip_clone: object = False
    output_text_buffer_length: object = 0
    structured_outputs: object = None
    logit_bias: object = None
    allowed_token_ids: object = None
    extra_args: object = None
    bad_words: object = None
    skip_reading_prefix_cache: object = None
    thinking_token_budget: object = None
    repetition_detection: object = None
    routed_experts_prompt_start: object = 0
    trace_decode_token_ids: object = None

    def __init__(self, **kwargs):
        fields = {f["name"] for f in RECORDED["SamplingParams"]}
        for key, value in kwargs.items():
            if key not in fields:
                raise TypeError(f"Unexpected keyword argument '{key}'")
            setattr(self, key, value)
        self._verify_args()

    def _verify_args(self) -> None:
        """The checks of vLLM's SamplingParams._verify_args that our settings and --gen-arg values can reach, with its
        texts; vLLM raises VLLMValidationError for them (not a ValueError)."""
        if not -2.0 <= self.presence_penalty <= 2.0:
            raise VLLMValidationError(f"presence_penalty must be in [-2, 2], got {self.presence_penalty}.")
        if not -2.0 <= self.frequency_penalty <= 2.0:
            raise VLLMValidationError(f"frequency_penalty must be in [-2, 2], got {self.frequency_penalty}.")
        if not math.isfinite(self.repetition_penalty):
            raise VLLMValidationError(f"repetition_penalty must be a finite number, got {self.repetition_penalty}.")
        if self.repetition_penalty <= 0.0:
            raise VLLMValidationError(f"repetition_penalty must be greater than zero, got {self.repetition_penalty}.")
        if not math.isfinite(self.temperature):
            raise VLLMValidationError(f"temperature must be a finite number, got {self.temperature}.", parameter="temperature", value=self.temperature)
        if self.temperature < 0.0:
            raise VLLMValidationError(f"temperature must be non-negative, got {self.temperature}.", parameter="temperature", value=self.temperature)
        if self.temperature > 2.0:
            raise VLLMValidationError(f"temperature must be in [0, 2], got {self.temperature}.", parameter="temperature", value=self.temperature)
        if not 0.0 < self.top_p <= 1.0:
            raise VLLMValidationError(f"top_p must be in (0, 1], got {self.top_p}.", parameter="top_p", value=self.top_p)
        if self.top_k < -1:
            raise VLLMValidationError(f"top_k must be 0 (disable), or at least 1, got {self.top_k}.")
        if not isinstance(self.top_k, int):
            raise VLLMValidationError(f"top_k must be an integer, got {type(self.top_k).__name__}")
        if not 0.0 <= self.min_p <= 1.0:
            raise VLLMValidationError(f"min_p must be in [0, 1], got {self.min_p}.")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise VLLMValidationError(f"max_tokens must be at least 1, got {self.max_tokens}.", parameter="max_tokens", value=self.max_tokens)
        if self.min_tokens < 0:
            raise VLLMValidationError(f"min_tokens must be greater than or equal to 0, got {self.min_tokens}.")
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise VLLMValidationError(f"min_tokens must be less than or equal to max_tokens={self.max_tokens}, got {self.min_tokens}.")


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None = None
    logprobs: object = None
    finish_reason: str | None = "stop"


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    prompt_logprobs: object
    outputs: list[CompletionOutput]
    finished: bool = True


@dataclass
class _Call:
    conversations: list
    sampling_params: object
    kwargs: dict = field(default_factory=dict)


class LLM:
    def __init__(self, model, *, runner='auto', convert='auto', tokenizer=None, tokenizer_mode='auto', skip_tokenizer_init=False,
                 trust_remote_code=False, allowed_local_media_path='', allowed_media_domains=None, tensor_parallel_size=1, dtype='auto',
                 quantization=None, revision=None, tokenizer_revision=None, chat_template=None, seed=0, gpu_memory_utilization=0.92,
                 cpu_offload_gb=0, offload_group_size=0, offload_num_in_group=1, offload_prefetch_step=1, offload_params=None,
                 enforce_eager=False, enable_return_routed_experts=False, return_sampling_mask=False, disable_custom_all_reduce=False,
                 hf_token=None, hf_overrides=None, mm_processor_kwargs=None, pooler_config=None, structured_outputs_config=None,
                 profiler_config=None, attention_config=None, kv_cache_memory_bytes=None, compilation_config=None, quantization_config=None,
                 logits_processors=None, spec_method=None, spec_model=None, spec_tokens=None, **kwargs):
        arguments = {k: v for k, v in locals().items() if k not in ("self", "kwargs")}  # every argument, as vLLM got it
        engine_fields = set(RECORDED["EngineArgs"])
        for key in kwargs:
            if key not in engine_fields:
                raise TypeError(f"EngineArgs.__init__() got an unexpected keyword argument '{key}'")
        self.model = model
        self.init_kwargs = {**arguments, **kwargs}
        self.limit_mm_per_prompt = dict(kwargs.get("limit_mm_per_prompt") or {})
        self.calls: list[_Call] = []
        INSTANCES.append(self)

    def _limit(self, modality: str) -> int:
        value = self.limit_mm_per_prompt.get(modality)
        if value is None:
            return 999  # MultiModalConfig.get_limit_per_prompt: an unspecified modality gets 999
        return value if isinstance(value, int) else int(value.get("count", 999))

    def _check(self, conversation) -> None:
        images = 0
        for message in conversation:
            content = message["content"]
            if isinstance(content, str):
                continue
            for part in content:
                if isinstance(part, str):  # vLLM takes a bare string as a text part
                    continue
                kind = part.get("type")
                if kind is None:
                    raise VLLMValidationError("Missing 'type' field in multimodal part.", parameter="type")
                if not isinstance(kind, str):
                    raise VLLMValidationError("Invalid 'type' field in multimodal part.", parameter="type")
                if kind not in RECORDED["chat_content_part_types"]:  # parse_chat_message_content_part's refusal
                    supported = ", ".join(sorted(RECORDED["chat_content_part_types"]))
                    raise VLLMValidationError(f"Unsupported chat content part type: {kind!r}. Supported types: {supported}.",
                                              parameter="type", value=kind)
                if kind in IMAGE_PART_TYPES:
                    images += 1
        limit = self._limit("image")
        if images > limit:
            message = RECORDED["mm_limit_error"].format(limit=limit, modality="image")
            raise VLLMValidationError(message + " Set `--limit-mm-per-prompt` to increase this limit.", parameter="image")

    def chat(self, messages, sampling_params=None, use_tqdm=True, lora_request=None, priority=None, chat_template=None,
             chat_template_content_format='auto', add_generation_prompt=True, continue_final_message=False, tools=None,
             chat_template_kwargs=None, tokenization_kwargs=None, mm_processor_kwargs=None):
        conversations = [messages] if messages and isinstance(messages[0], dict) else list(messages)
        if isinstance(sampling_params, (list, tuple)) and len(sampling_params) != len(conversations):
            raise ValueError("The lengths of prompts and sampling_params must be the same.")
        for conversation in conversations:
            self._check(conversation)
        self.calls.append(_Call(conversations, sampling_params, dict(mm_processor_kwargs=mm_processor_kwargs, use_tqdm=use_tqdm)))
        outputs = []
        for i, conversation in enumerate(conversations):
            params = sampling_params[i] if isinstance(sampling_params, (list, tuple)) else (sampling_params or SamplingParams())
            text = responder(conversation, params)
            outputs.append(RequestOutput(str(i), None, list(range(7)), None, [CompletionOutput(0, text, list(range(len(text.split()))))]))
        return outputs

    def generate(self, prompts, sampling_params=None, *, use_tqdm=True, lora_request=None, priority=None, tokenization_kwargs=None,
                 mm_processor_kwargs=None):
        raise NotImplementedError("the commonlink vllm backend uses LLM.chat; this double does not model LLM.generate")

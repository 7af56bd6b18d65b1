"""Adapters for remote-code VLM families that bring their own inference entry point (``--trust-remote-code``).

Each adapter loads the model the way its authors and the harnesses that run it do (VLMEvalKit's
vlmeval/vlm/{minicpm_v,molmo,mplug_owl3,phi3_vision}.py, lmms-eval's models/simple/{minicpm_v,phi3v}.py) and
turns a :class:`GenerationRequest` into that family's call:

* ``minicpm-chat`` (MiniCPM-V 2.x / 2.6, MiniCPM-o 2.6): ``AutoModel`` + ``AutoTokenizer``;
  ``model.chat(image=None, msgs=[{"role": "user", "content": [img1, img2, question]}], tokenizer=...,
  sampling=..., max_new_tokens=..., system_prompt=...)``. Versions whose ``chat`` takes a ``processor`` (2.6,
  o-2.6) get a batch of conversations in one call; older ones one at a time.
* ``molmo``: ``AutoModelForCausalLM`` + ``AutoProcessor``; ``processor.process(images=[...], text=...)``,
  ``model.generate_from_batch(inputs, GenerationConfig(...), tokenizer=processor.tokenizer)``; one request at a
  time, one image per request (see ``model_families.MOLMO_SEES_ONE_IMAGE``).
* ``mplug-owl3``: ``AutoModel`` + ``AutoTokenizer``; ``processor = model.init_processor(tokenizer)``, messages
  with ``<|image|>`` tags, ``model.generate(**inputs, tokenizer=..., max_new_tokens=..., decode_text=True)``; one
  request at a time (the processor encodes one conversation).
* ``phi3-vision`` (Phi-3 / 3.5-vision): ``AutoModelForCausalLM`` + ``AutoProcessor``; one prompt string from the
  tokenizer's chat template with ``<|image_1|>`` ... tags, ``processor(prompt, images)``, ``model.generate``; one
  request at a time (the processor takes one string).
* ``qwen-vl-chat`` (Qwen-VL-Chat v1): ``AutoModelForCausalLM`` + ``AutoTokenizer``;
  ``tokenizer.from_list_format([{"image": path}, {"text": ...}])`` and ``model.chat(tokenizer, query=...,
  history=None, generation_config=...)`` (the model card's and VLMEvalKit's qwen_vl.py QwenVLChat call); the model
  opens images from file paths, so each request's images are written to a temporary folder removed after the call;
  one request at a time (``chat`` takes one query).

Greedy decoding is the default everywhere (the paper's setting); ``--temperature`` samples each request alone
from ``--seed``. A request the family's code rejects (its asserts and input checks) comes back as a
:class:`RequestFailure`; a generation option the model refuses stops the run with an :class:`InputError`.
"""

from __future__ import annotations

import copy
import inspect
import os
import tempfile
import time
from collections.abc import Callable, Sequence

from commonlink.errors import InputError
from commonlink.eval.backends.base import (
    GenerationRequest,
    GenerationSettings,
    RequestFailure,
    message_parts,
)
from commonlink.eval.backends.model_families import MOLMO_SEES_ONE_IMAGE

#: What the families' own code raises on input it cannot take (asserts on roles / image tags, re.split on a
#: non-string, ...): reported per request rather than stopping the run.
INPUT_ERRORS = (AssertionError, ValueError, TypeError, IndexError, NotImplementedError)

#: MiniCPM-V's chat() builds its generation config from ``sampling`` and then keeps only ``**kwargs`` whose keys
#: are already in it (modeling_minicpmv.py: ``generation_config.update((k, kwargs[k]) for k in
#: generation_config.keys() & kwargs.keys())``); anything else would be dropped without a word.
MINICPM_SAMPLING_KEYS = ("top_p", "top_k", "temperature", "do_sample", "repetition_penalty")
MINICPM_BEAM_KEYS = ("num_beams", "repetition_penalty")
#: chat() arguments the adapter sets itself.
MINICPM_OWN_ARGS = (
    "self",
    "image",
    "msgs",
    "tokenizer",
    "processor",
    "vision_hidden_states",
    "max_new_tokens",
    "sampling",
    "system_prompt",
    "stream",
    "context",
    "kwargs",
)


def texts_and_images(request: GenerationRequest) -> list[tuple[str, object]]:
    """The request's parts with images converted to RGB (what every family's image processor expects)."""
    return [(kind, value.convert("RGB") if kind == "image" else value) for kind, value in message_parts(request)]


def sampling_options(settings: GenerationSettings) -> dict:
    """``model.generate`` options for the settings: greedy, or sampling with temperature and top-p."""
    if settings.greedy:
        return {"do_sample": False}
    return {"do_sample": True, "temperature": settings.temperature, "top_p": settings.top_p}


class FamilyAdapter:
    """What the family adapters share: timing, per-request seeding and per-request failures."""

    name = ""
    model = None
    tokenizer = None
    processor = None

    def __init__(self):
        self.generate_seconds = 0.0

    def answer(self, request: GenerationRequest, settings: GenerationSettings) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def generate(
        self, requests: Sequence[GenerationRequest], settings: GenerationSettings
    ) -> list[str | RequestFailure]:
        return [self.answer_or_failure(request, settings) for request in requests]

    def answer_or_failure(self, request: GenerationRequest, settings: GenerationSettings) -> str | RequestFailure:
        import torch

        if not settings.greedy:
            torch.manual_seed(settings.seed)  # each sampled answer from the seed alone: batch and resume invariant
        try:
            return self.answer(request, settings)
        except INPUT_ERRORS as exc:
            return RequestFailure(f"{self.name}: the model's code rejected the request ({type(exc).__name__}: {exc})")

    def timed_generate(self, call: Callable, *, options_checked_by_model: bool = True, **kwargs):
        """Run the model's generation entry point. Where the model checks the generation options (transformers'
        generate), a ValueError/TypeError is a refused --gen-arg: an InputError that stops the run."""
        start = time.perf_counter()
        try:
            return call(**kwargs)
        except (ValueError, TypeError) as exc:
            if not options_checked_by_model:
                raise
            raise InputError(
                f"{self.name}: the model refused the generation options ({exc}).",
                "Check the --gen-arg values against the model's generate() options, or drop them.",
            ) from exc
        finally:
            self.generate_seconds += time.perf_counter() - start

    def device(self):
        return self.model.device


class MiniCPMChat(FamilyAdapter):
    name = "minicpm-chat"

    def __init__(self, transformers, model: str, load_kwargs: dict, tokenizer_kwargs: dict, options: dict):
        super().__init__()
        self.model = transformers.AutoModel.from_pretrained(model, **load_kwargs)
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(model, **tokenizer_kwargs)
        params = inspect.signature(self.model.chat).parameters
        # where a system prompt goes: chat(system_prompt=...) in 2.5 (later revisions) and 2.6; a {"role": "system"}
        # message in o-2.6 (the omni chat, which has omni_input); earlier versions assert user/assistant roles only
        self.system_via = "argument" if "system_prompt" in params else "message" if "omni_input" in params else None
        self.batches = "processor" in params and "msgs" in params  # 2.6 / o-2.6: msgs may be a list of conversations
        self.chat_args = [p for p in params if p not in MINICPM_OWN_ARGS]
        self.options = self.checked(options, "--backend-arg processor.{key}=...", greedy=False, sampled=False)

    def checked(self, options: dict, flag: str, *, greedy: bool, sampled: bool) -> dict:
        """``options`` if chat() would use every one of them; else an InputError naming what it would use."""
        keys = (
            list(self.chat_args)
            + (list(MINICPM_BEAM_KEYS) if greedy else [])
            + (list(MINICPM_SAMPLING_KEYS) if sampled else [])
        )
        unknown = [k for k in options if k not in keys]
        if unknown:
            what = (
                "its named arguments"
                if not (greedy or sampled)
                else f"the keys of its own generation config for {'greedy' if greedy else 'sampled'} decoding and its "
                "named arguments"
            )
            raise InputError(
                f"{flag.format(key=unknown[0])} would be silently ignored by MiniCPM-V's chat(): it uses only {what}.",
                f"Use one of: {', '.join(dict.fromkeys(keys))}.",
            )
        return dict(options)

    def chat_kwargs(self, settings: GenerationSettings) -> dict:
        kwargs = {
            "tokenizer": self.tokenizer,
            "max_new_tokens": settings.max_new_tokens,
            "sampling": not settings.greedy,
        }
        if settings.greedy:
            kwargs.update(num_beams=1, repetition_penalty=1.0)  # plain greedy, not chat()'s 3-beam default
        else:
            kwargs.update(temperature=settings.temperature, top_p=settings.top_p)
        kwargs.update(
            self.checked(settings.extra, "--gen-arg {key}=...", greedy=settings.greedy, sampled=not settings.greedy)
        )
        kwargs.update(self.options)
        if settings.system_prompt and self.system_via is None:
            raise InputError(
                "This MiniCPM-V version's chat() has no system_prompt argument and accepts only user/assistant turns.",
                "Drop --system-prompt (or put the instruction into the question yourself).",
            )
        if settings.system_prompt and self.system_via == "argument":
            kwargs["system_prompt"] = settings.system_prompt
        return kwargs

    def conversation(self, request: GenerationRequest, settings: GenerationSettings) -> list[dict]:
        msgs = [{"role": "user", "content": [value for _, value in texts_and_images(request)]}]
        if settings.system_prompt and self.system_via == "message":
            msgs.insert(0, {"role": "system", "content": settings.system_prompt})
        return msgs

    @staticmethod
    def text_of(answer) -> str:
        return answer[0] if isinstance(answer, tuple) else answer  # MiniCPM-V 2.0 returned (answer, context, config)

    def generate(self, requests, settings):
        if self.batches and settings.greedy and len(requests) > 1:
            kwargs = self.chat_kwargs(settings)
            try:
                answers = self.timed_generate(
                    self.model.chat,
                    options_checked_by_model=False,
                    image=None,
                    msgs=[self.conversation(r, settings) for r in requests],
                    **kwargs,
                )
                return [self.text_of(a) for a in answers]
            except INPUT_ERRORS:
                pass  # one bad request must not sink its batch: redo them one by one so only that one fails
        return super().generate(requests, settings)

    def answer(self, request, settings):
        kwargs = self.chat_kwargs(settings)
        return self.text_of(
            self.timed_generate(
                self.model.chat,
                options_checked_by_model=False,
                image=None,
                msgs=self.conversation(request, settings),
                **kwargs,
            )
        )


class MolmoGenerate(FamilyAdapter):
    name = "molmo"

    def __init__(self, transformers, model: str, load_kwargs: dict, tokenizer_kwargs: dict, options: dict):
        super().__init__()
        self.transformers = transformers
        self.model = transformers.AutoModelForCausalLM.from_pretrained(model, **load_kwargs)
        self.processor = transformers.AutoProcessor.from_pretrained(model, **tokenizer_kwargs)
        self.tokenizer = self.processor.tokenizer
        self.options = dict(options)  # processor.process() options, e.g. images_kwargs={"max_crops": 36}

    def answer(self, request, settings):
        parts = texts_and_images(request)
        images = [value for kind, value in parts if kind == "image"]
        if len(images) > 1:
            raise ValueError(f"{MOLMO_SEES_ONE_IMAGE}; this request has {len(images)}")
        text = "".join(value for kind, value in parts if kind == "text")
        if settings.system_prompt:  # Molmo has no system turn: the instruction goes before the question
            text = f"{settings.system_prompt}\n\n{text}"
        unknown = [k for k in settings.extra if not hasattr(self.transformers.GenerationConfig(), k)]
        if unknown:  # GenerationConfig keeps any attribute without a word; generate would never read a misspelt one
            raise InputError(
                f"--gen-arg {unknown[0]}=... is not a transformers GenerationConfig field, so Molmo's "
                "generate_from_batch would ignore it.",
                "Use GenerationConfig fields, e.g. repetition_penalty, top_k, num_beams, no_repeat_ngram_size.",
            )
        inputs = self.processor.process(images=images or None, text=text, **self.options)
        inputs = {k: v.to(self.device()).unsqueeze(0) for k, v in inputs.items()}
        if "images" in inputs:
            inputs["images"] = inputs["images"].to(self.model.dtype)
        # use_cache: generate_from_batch asserts it, and transformers 5 leaves it None by default
        config = self.transformers.GenerationConfig(
            max_new_tokens=settings.max_new_tokens,
            stop_strings="<|endoftext|>",
            use_cache=True,
            **sampling_options(settings),
            **settings.extra,
        )
        output = self.timed_generate(
            self.model.generate_from_batch, batch=inputs, generation_config=config, tokenizer=self.tokenizer
        )
        return self.tokenizer.decode(output[0, inputs["input_ids"].size(1) :], skip_special_tokens=True).strip()


class MplugOwl3Generate(FamilyAdapter):
    name = "mplug-owl3"

    def __init__(self, transformers, model: str, load_kwargs: dict, tokenizer_kwargs: dict, options: dict):
        super().__init__()
        self.model = transformers.AutoModel.from_pretrained(model, **load_kwargs)
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(model, **tokenizer_kwargs)
        self.processor = self.model.init_processor(self.tokenizer)
        self.options = dict(options)  # processor call options, e.g. cut_enable=False (VLMEvalKit's choice)

    def answer(self, request, settings):
        parts = texts_and_images(request)
        content = "".join("<|image|>" if kind == "image" else value for kind, value in parts)
        messages = ([{"role": "system", "content": settings.system_prompt}] if settings.system_prompt else []) + [
            {"role": "user", "content": content},
            {"role": "assistant", "content": ""},
        ]
        images = [value for kind, value in parts if kind == "image"]
        inputs = self.processor(messages, images=images or None, videos=None, **self.options)
        inputs.to(self.device())
        answers = self.timed_generate(
            self.model.generate,
            **inputs,
            tokenizer=self.tokenizer,
            max_new_tokens=settings.max_new_tokens,
            decode_text=True,
            **sampling_options(settings),
            **settings.extra,
        )
        return answers[0]


class Phi3Vision(FamilyAdapter):
    name = "phi3-vision"

    def __init__(self, transformers, model: str, load_kwargs: dict, tokenizer_kwargs: dict, options: dict):
        super().__init__()
        self.model = transformers.AutoModelForCausalLM.from_pretrained(model, **load_kwargs)
        # processor.KEY options go to from_pretrained (e.g. num_crops=4 for Phi-3.5-vision with several images)
        self.processor = transformers.AutoProcessor.from_pretrained(model, **tokenizer_kwargs, **options)
        self.tokenizer = self.processor.tokenizer

    def answer(self, request, settings):
        parts = texts_and_images(request)
        numbers = iter(range(1, len(parts) + 1))
        content = "".join(f"<|image_{next(numbers)}|>\n" if kind == "image" else value for kind, value in parts)
        messages = ([{"role": "system", "content": settings.system_prompt}] if settings.system_prompt else []) + [
            {"role": "user", "content": content}
        ]
        prompt = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        images = [value for kind, value in parts if kind == "image"]
        inputs = self.processor(prompt, images or None, return_tensors="pt").to(self.device())
        if "pixel_values" in inputs:
            inputs["pixel_values"] = inputs["pixel_values"].to(self.model.dtype)
        output = self.timed_generate(
            self.model.generate,
            **inputs,
            eos_token_id=self.tokenizer.eos_token_id,
            max_new_tokens=settings.max_new_tokens,
            **sampling_options(settings),
            **settings.extra,
        )
        new_tokens = output[:, inputs["input_ids"].shape[1] :]
        return self.processor.batch_decode(new_tokens, skip_special_tokens=True, clean_up_tokenization_spaces=False)[0]


#: Qwen-VL's tokenizer puts an image's path into the prompt as one token a byte, padded to 256 tokens, and its model
#: reads the path back up to the first pad token (tokenization_qwen.py IMG_TOKEN_SPAN; modeling_qwen.py): a path
#: must stay under 256 bytes.
QWEN_VL_IMAGE_SPAN = 256


class QwenVLChat(FamilyAdapter):
    name = "qwen-vl-chat"

    def __init__(self, transformers, model: str, load_kwargs: dict, tokenizer_kwargs: dict, options: dict):
        super().__init__()
        self.model = transformers.AutoModelForCausalLM.from_pretrained(model, **load_kwargs)
        # processor.KEY options go to the tokenizer (Qwen-VL has no processor: its tokenizer formats images)
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(model, **tokenizer_kwargs, **options)
        chat_format = getattr(getattr(self.model, "generation_config", None), "chat_format", None)
        if chat_format != "chatml":
            # chat() asserts chatml; the base Qwen-VL (chat_format "raw") is not instruction-tuned
            raise InputError(
                f"{model!r}: Qwen-VL's chat() needs the chat model's generation config (chat_format 'chatml'); this "
                f"model's is {chat_format!r}, as for the base, not instruction-tuned Qwen-VL.",
                "Use Qwen/Qwen-VL-Chat (or a checkpoint with its generation_config.json).",
            )

    def generation_config(self, settings: GenerationSettings):
        """A copy of the model's own generation config (chat_format, stop tokens, max_window_size kept) with the run's
        decoding: chat() hands it to generate(), so nothing the model card's config says about sampling survives."""
        config = copy.deepcopy(self.model.generation_config)
        config.max_new_tokens = settings.max_new_tokens
        if settings.greedy:  # Qwen-VL-Chat's own config samples (top_p 0.3)
            config.update(do_sample=False, top_p=None, top_k=None, temperature=None)
        else:
            config.update(do_sample=True, temperature=settings.temperature, top_p=settings.top_p)
        unknown = config.update(**settings.extra)
        if unknown:  # GenerationConfig.update skips what is not a field: generate would never read it
            raise InputError(
                f"--gen-arg {next(iter(unknown))}=... is not a field of Qwen-VL-Chat's generation config, so chat() "
                "would ignore it.",
                "Use GenerationConfig fields, e.g. repetition_penalty, top_k, num_beams, no_repeat_ngram_size.",
            )
        return config

    def answer(self, request, settings):
        config = self.generation_config(settings)
        with tempfile.TemporaryDirectory(prefix="commonlink-qwenvl-") as folder:
            items = []
            for kind, value in texts_and_images(request):
                if kind == "text":
                    items.append({"text": value})
                    continue
                path = os.path.join(folder, f"{len(items)}.png")
                if len(path.encode("utf-8")) >= QWEN_VL_IMAGE_SPAN:
                    raise InputError(
                        f"The temporary image path {path!r} is {len(path.encode('utf-8'))} bytes; Qwen-VL reads image "
                        f"paths of under {QWEN_VL_IMAGE_SPAN} bytes only.",
                        "Point TMPDIR at a folder with a shorter path, e.g. TMPDIR=/tmp.",
                    )
                value.save(path, format="PNG")  # lossless: the model sees the request's pixels
                items.append({"image": path})
            query = self.tokenizer.from_list_format(items)
            system = {"system": settings.system_prompt} if settings.system_prompt else {}  # else chat()'s own
            response, _ = self.timed_generate(
                self.model.chat,
                options_checked_by_model=False,
                tokenizer=self.tokenizer,
                query=query,
                history=None,
                generation_config=config,
                **system,
            )
        return response


FAMILY_CLASSES = {
    "minicpm-chat": MiniCPMChat,
    "molmo": MolmoGenerate,
    "mplug-owl3": MplugOwl3Generate,
    "phi3-vision": Phi3Vision,
    "qwen-vl-chat": QwenVLChat,
}

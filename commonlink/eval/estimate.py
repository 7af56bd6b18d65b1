"""What a run will send, told before the first request (and alone with ``--dry-run``): requests, images and an
estimate of the tokens, so a paid API run is not a surprise.

Row tasks (Common-O, perception, concept perception) are estimated from the requests of a sample of their rows
(built without decoding images), scaled to the rows selected; association tasks from their rows' lengths
(chains: an upper bound, as a chain stops at its first wrong answer). Tokens are an estimate, not a count: each
image as :data:`TOKENS_PER_IMAGE` tokens (a 384-px shorter side is about that many vision tokens for Qwen2-VL-class
models; APIs bill their own way), text at :data:`CHARS_PER_TOKEN` characters a token, and every answer at the full
``--max-new-tokens``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = ["CHARS_PER_TOKEN", "TOKENS_PER_IMAGE", "RequestEstimate", "estimate_rows"]

TOKENS_PER_IMAGE = 256
CHARS_PER_TOKEN = 4
#: rows whose requests are built to estimate a row task
SAMPLE_ROWS = 16


@dataclass
class RequestEstimate:
    requests: int
    images: int
    text_chars: int
    max_new_tokens: int
    bound: bool = False  #: True: at most this many (chains stop early)

    @property
    def input_tokens(self) -> int:
        return self.images * TOKENS_PER_IMAGE + self.text_chars // CHARS_PER_TOKEN

    @property
    def output_tokens(self) -> int:
        return self.requests * self.max_new_tokens

    def to_dict(self) -> dict:
        return asdict(self) | {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens}

    def line(self) -> str:
        up_to = "up to " if self.bound else ""
        return (
            f"This run sends {up_to}{self.requests:,} requests with {self.images:,} images: about "
            f"{self.input_tokens:,} input tokens (images at ~{TOKENS_PER_IMAGE} tokens each, text at "
            f"{CHARS_PER_TOKEN} characters a token) and at most {self.output_tokens:,} output tokens."
        )


def _text_chars(prompt) -> int:
    return len(prompt) if isinstance(prompt, str) else sum(len(p) for p in prompt if isinstance(p, str))


def estimate_rows(task, dataset, indices, settings, models: int = 1) -> RequestEstimate:
    """The requests of up to :data:`SAMPLE_ROWS` of ``indices`` (rows read without images), scaled to all."""
    sample = list(indices[:SAMPLE_ROWS])
    requests = images = chars = 0
    for i in sample:
        try:
            example = dataset.get(i, images=False)
        except TypeError:  # a dataset whose rows carry no pixels to skip
            example = dataset.get(i)
        for request, _ in task.requests(example):
            requests += 1
            images += len(request.images)
            chars += _text_chars(request.prompt) + len(settings.system_prompt or "")
    scale = len(indices) / len(sample) if sample else 0
    return RequestEstimate(
        round(requests * scale) * models,
        round(images * scale) * models,
        round(chars * scale) * models,
        settings.max_new_tokens,
    )

"""Models for checking a harness export against commonlink's own evaluation, used on both sides.

A *content-hash* model answers from a hash of exactly what it was sent: the texts and the pixels of the images,
in order (a commonlink request's parts as its backends send them: ``eval.backends.message_parts``). The same request gets the same answer from a commonlink backend (:class:`ContentHashBackend`) and from
another harness's model class (VLMEvalKit's, built on :func:`content_answer` and :func:`vlmeval_message_parts`),
while a request that differs anywhere (a prompt, an image, their order) almost surely gets another answer, so
equal predictions row by row show that the harness sent what ``commonlink eval`` sends. The answers vary (right,
wrong, extra letters, unreadable) so the scores compared are not trivially equal.

:class:`ReplayBackend` gives commonlink the answers another harness's real model gave, looked up by the same
content key, so both score identical predictions; a request the other harness never sent is an error.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence

from PIL import Image

from commonlink.eval.backends import (
    BackendInfo,
    GenerationRequest,
    GenerationSettings,
    message_parts,
)

#: What a content-hash model says when its hash picks "no answer" (one request in seven).
UNREADABLE_ANSWER = "I cannot tell."


def content_key(parts: Sequence[tuple[str, object]]) -> str:
    """Hash of a message given as ``("image", PIL image)`` / ``("text", str)`` parts, in order."""
    digest = hashlib.sha256()
    for kind, value in parts:
        if kind == "image":
            image = value.convert("RGB")
            digest.update(b"I" + repr(image.size).encode() + hashlib.sha256(image.tobytes()).digest())
        else:
            digest.update(b"T" + str(value).encode())
    return digest.hexdigest()


def content_answer(parts: Sequence[tuple[str, object]]) -> str:
    """A deterministic answer in the format the prompt asks for, picked by :func:`content_key`."""
    h = int(content_key(parts), 16)
    text = "".join(str(v) for k, v in parts if k == "text")
    if h % 7 == 0:
        return UNREADABLE_ANSWER
    if "Options: [Image1, Image2]" in text:  # association selection
        return f"Image{1 + h % 2}"
    letters = re.findall(r"(?:^|, |: )([A-Z])\. ", text) or ["A"]  # Common-O: "A. cup, B. ..."
    if (h >> 8) % 4:  # mostly one letter (so some answers are right), else any subset (extra letters)
        return f"Answer: {letters[(h >> 40) % len(letters)]}"
    return "Answer: " + ", ".join([x for i, x in enumerate(letters) if (h >> (i + 16)) % 2] or letters[:1])


def vlmeval_message_parts(message: Sequence[Mapping]) -> list[tuple[str, object]]:
    """The parts of a VLMEvalKit message (``{"type": "image", "value": path}`` / ``{"type": "text", ...}``)."""
    return [("image", Image.open(m["value"])) if m["type"] == "image" else ("text", m["value"]) for m in message]


class ContentHashBackend:
    """A commonlink backend answering :func:`content_answer` of each request."""

    def __init__(self, model: str = "content-hash"):
        self.generate_seconds = 0.0
        self.info = self.planned_info(model)

    @staticmethod
    def planned_info(model: str, **options) -> BackendInfo:
        return BackendInfo(backend="content-hash", model=model, fingerprint="content-hash", batch_invariant=True, default_batch_size=8)

    def generate(self, requests: Sequence[GenerationRequest], settings: GenerationSettings) -> list[str]:
        return [content_answer(message_parts(r)) for r in requests]

    def close(self) -> None:
        pass


class ReplayBackend:
    """A commonlink backend answering with another harness's recorded answers, by :func:`content_key`."""

    def __init__(self, answers: Mapping[str, str], model: str = "replay"):
        self.answers = dict(answers)
        self.generate_seconds = 0.0
        self.info = BackendInfo(backend="replay", model=model, fingerprint=f"replay:{len(self.answers)}", batch_invariant=True, default_batch_size=8)

    def generate(self, requests: Sequence[GenerationRequest], settings: GenerationSettings) -> list[str]:
        out = []
        for request in requests:
            key = content_key(message_parts(request))
            if key not in self.answers:
                raise KeyError(f"request {request.id}: the other harness never sent this message (no recorded answer for it)")
            out.append(self.answers[key])
        return out

    def close(self) -> None:
        pass

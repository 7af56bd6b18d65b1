"""Test double of mPLUG-Owl3's processor (processing_mplugowl3.py of mPLUG/mPLUG-Owl3-*; the model builds it with
``model.init_processor(tokenizer)``, there is no AutoProcessor entry).

``__call__(messages, images=None, videos=None, max_length=None, cut_enable=True, return_tensors=..., **kwargs)``
as the real one: every ``<|image|>`` in a message's content takes the next image, in order, and the number of
``<|image|>`` tags must equal the number of images (an AssertionError otherwise); with ``cut_enable`` (the
default) an image is also cut into crops, each one more ``<|image|>`` (here: the left and right halves). The
text is built the Qwen way (``build_text_qwen``): an empty system turn unless the first message is a system
message, roles system/user/assistant only (NotImplementedError otherwise), and a trailing empty assistant message
opens the answer. One conversation per call: input_ids has batch size 1.
"""

import re

import torch
from transformers import BatchFeature

from .tiny_vlm_core import TOKENS_PER_IMAGE, image_patches


class mPLUGOwl3ImageProcessor:
    def __init__(self, image_size=384):
        self.image_size = image_size

    def __call__(self, images, cut_enable=True, return_tensors=None):
        views = []
        for image in images:
            views.append(image_patches(image))
            if cut_enable:
                width, height = image.size
                views += [image_patches(image.crop((0, 0, width // 2, height))), image_patches(image.crop((width // 2, 0, width, height)))]
        return {"pixel_values": torch.stack(views), "cut_shape": [(1, 2)] if cut_enable else None}


class mPLUGOwl3Processor:
    def __init__(self, image_processor=None, tokenizer=None, prompt_style="chatml", inference_mode=True, addition_eod="<|endofchunk|>"):
        self.image_processor = image_processor or mPLUGOwl3ImageProcessor()
        self.tokenizer = tokenizer
        self.prompt_style = prompt_style
        self.inference_mode = inference_mode
        self.addition_eod = addition_eod

    def build_text_qwen(self, messages):
        im_start, im_end = "<|im_start|>", "<|im_end|>"
        text = []
        for num_turn, message in enumerate(messages):
            if num_turn == 0 and message["role"] != "system":
                text.append({"text": f"{im_start}system\n{im_end}", "label": 0})
            if message["role"] == "system":
                text.append({"text": f"{im_start}system\n{message['content']}{im_end}", "label": 0})
            elif message["role"] == "user":
                text.append({"text": f"\n{im_start}user\n{message['content']}{im_end}", "label": 0})
            elif message["role"] == "assistant":
                text.append({"text": f"\n{im_start}assistant\n", "label": 0})
                text.append({"text": f"{message['content']}{im_end}", "label": 1})
                text.append({"text": self.addition_eod, "label": 1})
            else:
                raise NotImplementedError
        if self.inference_mode:
            while text and text[-1]["label"] == 1:
                text.pop()
        return "".join(t["text"] for t in text)

    def __call__(self, messages, images=None, videos=None, max_length=None, cut_enable=True, return_tensors="pt", **kwargs):
        messages = [dict(m) for m in messages]
        pixel_values = None
        if images:
            assert sum(m["content"].count("<|image|>") for m in messages) == len(images), "one <|image|> per image"
            tensors, ptr = [], 0
            for message in messages:
                text = ""
                for piece in re.split(r"(<\|image\|>)", message["content"]):
                    if piece == "<|image|>":
                        inputs = self.image_processor([images[ptr]], cut_enable=cut_enable, return_tensors=return_tensors)
                        ptr += 1
                        tensors.append(inputs["pixel_values"])
                        text += "<|image|>" * len(inputs["pixel_values"])
                    else:
                        text += piece
                message["content"] = text
            pixel_values = torch.cat(tensors)
        prompt = self.build_text_qwen(messages).replace("<|image|>", "<|image|>" * TOKENS_PER_IMAGE)
        ids = self.tokenizer(prompt, add_special_tokens=False).input_ids
        if max_length is not None:
            ids = ids[:max_length]
        input_ids = torch.tensor([ids], dtype=torch.long)
        media_offset = (input_ids == self.tokenizer.convert_tokens_to_ids("<|image|>")).nonzero()[:, 1:].T
        data = {"input_ids": input_ids, "media_offset": media_offset}
        if pixel_values is not None:
            data["pixel_values"] = pixel_values
        return BatchFeature(data)

"""Test double of Phi-3-vision's processor (processing_phi3_v.py of microsoft/Phi-3-vision-128k-instruct,
loaded with AutoProcessor and trust_remote_code; called as VLMEvalKit's vlmeval/vlm/phi3_vision.py and
lmms-eval's lmms_eval/models/simple/phi3v.py do: one prompt string from the tokenizer's chat template, with
``<|image_1|>``, ``<|image_2|>``, ... tags, and a flat list of images).

``__call__(text, images=None, padding=False, truncation=None, max_length=None, return_tensors=...)`` as the
real one: the text is split with ``re.split`` (so it must be one string, not a batch), image tags must number
1..n without gaps and n must equal the number of images (AssertionError otherwise), and each tag becomes
``num_img_tokens`` copies of the negative image id. Returns a batch of one.
"""

import re

import torch
from transformers import BatchFeature, ProcessorMixin

from .tiny_vlm_core import TOKENS_PER_IMAGE, image_patches


class Phi3VProcessor(ProcessorMixin):
    attributes = ["tokenizer"]  # noqa: RUF012 - ProcessorMixin reads this class list
    tokenizer_class = "AutoTokenizer"

    def __init__(self, tokenizer=None, **kwargs):
        super().__init__(tokenizer)
        self.num_img_tokens = TOKENS_PER_IMAGE

    def __call__(self, text, images=None, padding=False, truncation=None, max_length=None, return_tensors="pt"):
        if not images:
            return BatchFeature(data={**self.tokenizer(text, return_tensors=return_tensors, padding=padding, truncation=truncation, max_length=max_length)})
        pattern = r"<\|image_\d+\|>"
        prompt_chunks = [self.tokenizer(chunk).input_ids for chunk in re.split(pattern, text)]
        image_tags = re.findall(pattern, text)
        image_ids = [int(s.split("|")[1].split("_")[-1]) for s in image_tags]
        unique_image_ids = sorted(set(image_ids))
        assert unique_image_ids == list(range(1, len(unique_image_ids) + 1)), (
            f"image_ids must start from 1, and must be continuous int, e.g. [1, 2, 3], cannot be {unique_image_ids}")
        assert len(unique_image_ids) == len(images), (
            f"total images must be the same as the number of image tags, got {len(unique_image_ids)} image tags and {len(images)} images")
        image_ids_pad = [[-iid] * self.num_img_tokens for iid in image_ids]
        input_ids = []
        for i, chunk in enumerate(prompt_chunks):
            input_ids += chunk
            if i < len(image_ids_pad):
                input_ids += image_ids_pad[i]
        input_ids = torch.tensor(input_ids, dtype=torch.long).unsqueeze(0)
        pixel_values = torch.stack([image_patches(img) for img in images]).unsqueeze(0)
        image_sizes = torch.tensor([[img.size[1], img.size[0]] for img in images])
        return BatchFeature(data={"input_ids": input_ids, "attention_mask": (input_ids > -1000000).long(), "pixel_values": pixel_values,
                                  "image_sizes": image_sizes})

    def batch_decode(self, *args, **kwargs):
        return self.tokenizer.batch_decode(*args, **kwargs)

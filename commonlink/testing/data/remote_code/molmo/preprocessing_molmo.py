"""Test double of Molmo's processor (preprocessing_molmo.py + image_preprocessing_molmo.py of
allenai/Molmo-7B-D-0924, loaded with AutoProcessor and trust_remote_code).

``process(text=None, images=None, **kwargs)`` returns one example's unbatched tensors (``input_ids``,
``images``, ``image_input_idx``, ``image_masks``); callers add the batch dimension with ``unsqueeze(0)``. As
in the real code, the text becomes `` User: {text} Assistant:`` (``message_format="role"``,
``always_start_with_space=True``), a BOS (or EOS when there is none) is prepended, and every image is inserted
at the start ("For now only support inserting images at the start"). The real ``multimodal_preprocess`` maps
each image's patches to token positions relative to that image's own block, so with several images all of them
map onto the first block's positions: the model effectively sees one image. This double does the same.
Options arrive as ``images_kwargs={...}`` / ``text_kwargs={...}`` (crop counts are not modelled here).
"""

import numpy as np
import torch
from transformers import ProcessorMixin

from .tiny_vlm_core import TOKENS_PER_IMAGE, image_patches

TEXT_DEFAULTS = {"style": "long_caption", "system_prompt": "none", "message_format": "role", "always_start_with_space": True, "sequence_length": 1536}
IMAGE_DEFAULTS = {"max_crops": 12, "overlap_margins": [4, 4], "base_image_input_size": [336, 336], "image_patch_size": 14}


class MolmoProcessor(ProcessorMixin):
    attributes = ["tokenizer"]  # noqa: RUF012 - ProcessorMixin reads this class list
    tokenizer_class = "AutoTokenizer"

    def __init__(self, tokenizer=None, **kwargs):
        super().__init__(tokenizer)

    def get_tokens_input(self, prompt, message_format, always_start_with_space):
        if message_format == "none" or message_format is None:
            pass
        elif message_format == "role":
            prompt = "User: " + prompt + " Assistant:"
        else:
            raise NotImplementedError(f"Message format {message_format} not implemented")
        if always_start_with_space:
            prompt = " " + prompt
        return self.tokenizer.encode(prompt, add_special_tokens=False)

    def process(self, text=None, images=None, **kwargs):
        text_kwargs = dict(TEXT_DEFAULTS, **kwargs.pop("text_kwargs", {}))
        images_kwargs = dict(IMAGE_DEFAULTS, **kwargs.pop("images_kwargs", {}))
        for key, value in kwargs.items():  # flat options go to the modality that has them; others are ignored
            (text_kwargs if key in TEXT_DEFAULTS else images_kwargs)[key] = value
        tokens = self.get_tokens_input(text, text_kwargs["message_format"], text_kwargs["always_start_with_space"])
        patch = self.tokenizer.convert_tokens_to_ids("<im_patch>")
        start, end = self.tokenizer.convert_tokens_to_ids("<im_start>"), self.tokenizer.convert_tokens_to_ids("<im_end>")
        block = [start] + [patch] * TOKENS_PER_IMAGE + [end]
        images = list(images or [])
        out_tokens, crops, image_idx = [], [], []
        for image in images:  # image_idx -1 for every image: all at the start, each indexed within its own block
            out_tokens += block
            crops.append(image_patches(image).numpy())
            image_idx.append(np.arange(1, 1 + TOKENS_PER_IMAGE))
        input_ids = np.array(out_tokens + tokens, dtype=np.int64)[: text_kwargs["sequence_length"]]
        bos = self.tokenizer.bos_token_id or self.tokenizer.eos_token_id
        out = {"input_ids": np.pad(input_ids, [[1, 0]], constant_values=bos)}
        if images:
            out["images"] = np.stack(crops).astype(np.float32)
            out["image_input_idx"] = np.stack(image_idx) + 1  # shifted by one for the BOS, as the real code
            out["image_masks"] = np.ones((len(images), TOKENS_PER_IMAGE), dtype=np.float32)
        return {k: torch.from_numpy(v) for k, v in out.items()}

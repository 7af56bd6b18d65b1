"""Test double of Phi-3-vision (modeling_phi3_v.py of microsoft/Phi-3-vision-128k-instruct: AutoModelForCausalLM
with trust_remote_code, used through the standard ``model.generate(**inputs, ...)``): image slots are the
negative ids the processor wrote; their embeddings are the image's projected patches (tiny_vlm_core.py)."""

import torch
from transformers import LlamaForCausalLM

from .configuration_phi3_v import Phi3VConfig
from .tiny_vlm_core import embed_with_images, projector


class Phi3VForCausalLM(LlamaForCausalLM):
    config_class = Phi3VConfig

    def __init__(self, config):
        super().__init__(config)
        self.vision_embed_tokens = projector(config.hidden_size)
        self.received = []
        self.post_init()

    def generate(self, input_ids=None, attention_mask=None, pixel_values=None, image_sizes=None, **kwargs):
        self.received.append({"prompt_ids": input_ids[0].tolist(), "images": 0 if pixel_values is None else int(pixel_values.shape[1]),
                              "generate_kwargs": sorted(kwargs)})
        if pixel_values is None:
            return super().generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        with torch.inference_mode():
            embeds = embed_with_images(self, self.vision_embed_tokens, input_ids, pixel_values.flatten(0, 1), input_ids < 0)
        return super().generate(input_ids=input_ids.clamp(min=0), inputs_embeds=embeds, attention_mask=attention_mask, **kwargs)

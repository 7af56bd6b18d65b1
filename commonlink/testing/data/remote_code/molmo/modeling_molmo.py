"""Test double of Molmo (modeling_molmo.py of allenai/Molmo-7B-D-0924: AutoModelForCausalLM with
trust_remote_code), called as in its model card and VLMEvalKit's vlmeval/vlm/molmo.py:

    inputs = processor.process(images=[image], text=prompt)
    inputs = {k: v.to(model.device).unsqueeze(0) for k, v in inputs.items()}
    output = model.generate_from_batch(inputs, GenerationConfig(max_new_tokens=200, stop_strings="<|endoftext|>"),
                                       tokenizer=processor.tokenizer)
    answer = processor.tokenizer.decode(output[0, inputs["input_ids"].size(1):], skip_special_tokens=True)

``generate_from_batch(batch, generation_config=None, **kwargs)`` asserts ``generation_config.use_cache``, builds
the attention mask from ``input_ids != -1`` and returns prompt + answer tokens (it calls ``generate`` with the
input ids). Image features are scattered to ``image_input_idx``.
"""

import torch
from transformers import PreTrainedModel

from .config_molmo import MolmoConfig
from .tiny_vlm_core import PATCH_DIM, projector, text_model


class MolmoForCausalLM(PreTrainedModel):
    config_class = MolmoConfig
    base_model_prefix = "model"

    def __init__(self, config):
        super().__init__(config)
        self.model = text_model(config.llm_config)
        self.vision_backbone = projector(config.llm_config["hidden_size"])
        self.received = []
        self.post_init()

    @torch.no_grad()
    def generate_from_batch(self, batch, generation_config=None, **kwargs):
        if generation_config is not None:
            assert generation_config.use_cache
        images = batch.get("images")
        image_input_idx = batch.get("image_input_idx")
        input_ids = batch["input_ids"]
        max_new_tokens = generation_config.max_new_tokens
        assert max_new_tokens is not None
        attention_mask = (input_ids != -1).long()
        embeds = self.model.get_input_embeddings()(input_ids.clamp(min=0))
        if images is not None:
            features = self.vision_backbone(images.reshape(images.shape[0], -1, PATCH_DIM).to(embeds.dtype))
            embeds = embeds.clone()
            for b in range(input_ids.shape[0]):
                for crop, idx in zip(features[b], image_input_idx[b]):
                    embeds[b, idx] = crop
        self.received.append({"prompt_ids": input_ids[0].tolist(), "images": 0 if images is None else int(images.shape[1]),
                              "generation_config": generation_config.to_diff_dict(), "kwargs": sorted(kwargs)})
        return self.model.generate(input_ids=input_ids.clamp(min=0), inputs_embeds=embeds, generation_config=generation_config,
                                   attention_mask=attention_mask, **kwargs)

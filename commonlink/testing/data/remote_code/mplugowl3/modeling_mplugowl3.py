"""Test double of mPLUG-Owl3 (modeling_mplugowl3.py of mPLUG/mPLUG-Owl3-*, loaded with AutoModel and
trust_remote_code; called as in its README and VLMEvalKit's vlmeval/vlm/mplug_owl3.py):

    processor = model.init_processor(tokenizer)
    inputs = processor(messages, images=images, videos=None)
    answers = model.generate(**inputs, tokenizer=tokenizer, max_new_tokens=..., decode_text=True)

``generate(input_ids, pixel_values, media_offset, attention_mask, tokenizer, return_vision_hidden_states=False,
stream=False, decode_text=False, **kwargs)`` passes ``kwargs`` on to the language model's ``generate`` (so an
unknown option is refused there) with ``pad_token_id=0`` and the terminators as ``eos_token_id``, cuts the prompt
off the output and, with ``decode_text``, returns a list of strings. The real model attends to images through
hyper-attention at ``media_offset``; here the image slots carry projected patches (tiny_vlm_core.py).
"""

import torch
from transformers import PreTrainedModel

from .configuration_mplugowl3 import mPLUGOwl3Config
from .processing_mplugowl3 import mPLUGOwl3ImageProcessor, mPLUGOwl3Processor
from .tiny_vlm_core import embed_with_images, projector, text_model


class mPLUGOwl3Model(PreTrainedModel):
    config_class = mPLUGOwl3Config
    base_model_prefix = "language_model"

    def __init__(self, config):
        super().__init__(config)
        self.language_model = text_model(config.llm_config)
        self.vision2text_model = projector(config.llm_config["hidden_size"])
        self.processor = None
        self.terminators = ["<|im_end|>", "<|endoftext|>"]
        self.received = []
        self.post_init()

    def init_processor(self, tokenizer):
        ip = mPLUGOwl3ImageProcessor(image_size=384)
        self.processor = mPLUGOwl3Processor(image_processor=ip, tokenizer=tokenizer)
        return self.processor

    def _decode_text(self, result_ids, tokenizer):
        terminators = [tokenizer.convert_tokens_to_ids(i) for i in self.terminators]
        result_text = []
        for result in result_ids:
            result = result[result != 0]
            if len(result) and result[-1] in terminators:
                result = result[:-1]
            result_text.append(tokenizer.decode(result).strip())
        return result_text

    def generate(self, input_ids=None, pixel_values=None, media_offset=None, attention_mask=None, tokenizer=None,
                 return_vision_hidden_states=False, stream=False, decode_text=False, **kwargs):
        assert input_ids is not None
        image_slots = input_ids == tokenizer.convert_tokens_to_ids("<|image|>")
        self.received.append({"prompt": tokenizer.decode(input_ids[0]), "image_views": 0 if pixel_values is None else len(pixel_values),
                              "generate_kwargs": dict(kwargs)})
        with torch.inference_mode():
            embeds = embed_with_images(self.language_model, self.vision2text_model, input_ids, pixel_values, image_slots)
            terminators = [tokenizer.convert_tokens_to_ids(i) for i in self.terminators]
            output = self.language_model.generate(input_ids=input_ids, inputs_embeds=embeds, pad_token_id=0, eos_token_id=terminators,
                                                  attention_mask=attention_mask, **kwargs)
        output = output[:, input_ids.shape[1]:]
        result = self._decode_text(output, tokenizer) if decode_text else output
        return (result, None) if return_vision_hidden_states else result

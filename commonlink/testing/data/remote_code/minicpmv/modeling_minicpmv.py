"""Test double of MiniCPM-V 2.6 (openbmb/MiniCPM-V-2_6 modeling_minicpmv.py, loaded with AutoModel +
AutoTokenizer and trust_remote_code, as VLMEvalKit's vlmeval/vlm/minicpm_v.py MiniCPM_V_2_6 does).

``chat`` has the real signature and the real message handling: ``msgs`` is one conversation (a list of
{"role", "content"} dicts) or a batch of them (``msgs[0]`` a list, then ``image`` must be None); content is a
string or a list of PIL images and strings, each image becoming ``(<image>./</image>)`` and the parts joined with
newlines; roles are only user/assistant (the first one user); ``system_prompt`` is put first as a system
message; ``sampling=True`` (the default!) samples with top_p 0.8, top_k 100, temperature 0.7, repetition_penalty
1.05, ``sampling=False`` uses beam search (num_beams 3, repetition_penalty 1.2), and of ``**kwargs`` only keys
already in that generation config are kept -- others are silently dropped, as in the real code. Returns the
answer string (a list for a batch). The vision tower is a random projector (tiny_vlm_core.py); every call is
recorded in ``self.received`` so tests can see what reached the model.
"""

from copy import deepcopy

import torch
from PIL import Image
from transformers import PreTrainedModel

from .configuration_minicpm import MiniCPMVConfig
from .tiny_vlm_core import embed_with_images, image_patches, projector, text_model


class MiniCPMV(PreTrainedModel):
    config_class = MiniCPMVConfig
    base_model_prefix = "llm"

    def __init__(self, config):
        super().__init__(config)
        self.llm = text_model(config.llm_config)
        self.vpm = projector(config.llm_config["hidden_size"])
        self.terminators = ["<|im_end|>", "<|endoftext|>"]
        self.received = []
        self.post_init()

    def _tokenize(self, tokenizer, prompt, images, max_inp_length):
        # Stand-in for MiniCPMVProcessor: each image slot becomes <image> + query_num <unk> + </image>.
        assert prompt.count("(<image>./</image>)") == len(images), "image placeholders and images differ in number"
        expanded = prompt.replace("(<image>./</image>)", "<image>" + "<unk>" * self.config.query_num + "</image>")
        ids = tokenizer(expanded, add_special_tokens=False).input_ids[:max_inp_length]
        pixels = torch.stack([image_patches(img) for img in images]) if images else None
        return ids, pixels

    def chat(
        self,
        image,
        msgs,
        tokenizer,
        processor=None,
        vision_hidden_states=None,
        max_new_tokens=2048,
        min_new_tokens=0,
        sampling=True,
        max_inp_length=8192,
        system_prompt="",
        stream=False,
        max_slice_nums=None,
        use_image_id=None,
        **kwargs,
    ):
        batched = isinstance(msgs[0], list)
        msgs_list = msgs
        images_list = image
        if batched is False:
            images_list, msgs_list = [images_list], [msgs_list]
        else:
            assert images_list is None, "Please integrate image to msgs when using batch inference."
            images_list = [None] * len(msgs_list)
        assert len(images_list) == len(msgs_list), "The batch dim of images_list and msgs_list should be the same."

        prompts_lists, input_images_lists = [], []
        for image, msgs in zip(images_list, msgs_list):  # noqa: PLR1704 - shadowing as in the real chat()
            copy_msgs = deepcopy(msgs)
            assert len(msgs) > 0, "msgs is empty"
            assert sampling or not stream, "if use stream mode, make sure sampling=True"
            if image is not None and isinstance(copy_msgs[0]["content"], str):
                copy_msgs[0]["content"] = [image, copy_msgs[0]["content"]]
            images = []
            for i, msg in enumerate(copy_msgs):
                role = msg["role"]
                content = msg["content"]
                assert role in ["user", "assistant"]
                if i == 0:
                    assert role == "user", "The role of first msg should be user"
                if isinstance(content, str):
                    content = [content]
                cur_msgs = []
                for c in content:
                    if isinstance(c, Image.Image):
                        images.append(c)
                        cur_msgs.append("(<image>./</image>)")
                    elif isinstance(c, str):
                        cur_msgs.append(c)
                msg["content"] = "\n".join(cur_msgs)
            if system_prompt:
                copy_msgs = [{"role": "system", "content": system_prompt}] + copy_msgs
            prompts_lists.append(tokenizer.apply_chat_template(copy_msgs, tokenize=False, add_generation_prompt=True))
            input_images_lists.append(images)

        if sampling:
            generation_config = {"top_p": 0.8, "top_k": 100, "temperature": 0.7, "do_sample": True, "repetition_penalty": 1.05}
        else:
            generation_config = {"num_beams": 3, "repetition_penalty": 1.2}
        if min_new_tokens > 0:
            generation_config["min_new_tokens"] = min_new_tokens
        generation_config.update((k, kwargs[k]) for k in generation_config.keys() & kwargs.keys())

        encoded = [self._tokenize(tokenizer, p, imgs, max_inp_length) for p, imgs in zip(prompts_lists, input_images_lists)]
        width = max(len(ids) for ids, _ in encoded)
        input_ids = torch.zeros((len(encoded), width), dtype=torch.long)  # left padding with 0, as the real processor
        attention_mask = torch.zeros((len(encoded), width), dtype=torch.long)
        for row, (ids, _) in enumerate(encoded):
            input_ids[row, width - len(ids):] = torch.tensor(ids)
            attention_mask[row, width - len(ids):] = 1
        pixels = [p for _, p in encoded if p is not None]
        unk = tokenizer.convert_tokens_to_ids("<unk>")
        self.received.append({
            "prompts": prompts_lists, "images": [len(imgs) for imgs in input_images_lists], "max_new_tokens": max_new_tokens,
            "generation_config": dict(generation_config), "ignored_kwargs": sorted(set(kwargs) - set(generation_config)),
            "image_sizes": [[img.size for img in imgs] for imgs in input_images_lists],
        })
        with torch.inference_mode():
            embeds = embed_with_images(self.llm, self.vpm, input_ids, torch.cat(pixels) if pixels else None, input_ids == unk)
            terminators = [tokenizer.convert_tokens_to_ids(t) for t in self.terminators]
            output = self.llm.generate(inputs_embeds=embeds, attention_mask=attention_mask, pad_token_id=0, eos_token_id=terminators,
                                       max_new_tokens=max_new_tokens, **generation_config)
        answers = []
        for result in output:  # _decode_text of the real model
            result = result[result != 0]
            if len(result) and result[-1] in terminators:
                result = result[:-1]
            answers.append(tokenizer.decode(result).strip())
        return answers if batched else answers[0]

"""Pieces every tiny test double shares: images as patch vectors, a pixel projector and a Llama text model.

Copied into each tiny model folder (the real families ship their vision towers as files beside their modeling
code the same way, e.g. MiniCPM-V's resampler.py). Weights are random; what is real is that every image's
pixels become embeddings the text model attends to, and that answers are decoded from generated tokens.
"""

import numpy as np
import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

PATCH = 4
GRID = 2
TOKENS_PER_IMAGE = GRID * GRID
PATCH_DIM = 3 * PATCH * PATCH


def image_patches(image) -> torch.Tensor:
    """(TOKENS_PER_IMAGE, PATCH_DIM) pixel patches of a PIL image, in [0, 1]."""
    side = PATCH * GRID
    arr = np.asarray(image.convert("RGB").resize((side, side)), dtype=np.float32) / 255.0
    patches = torch.from_numpy(arr).reshape(GRID, PATCH, GRID, PATCH, 3).permute(0, 2, 1, 3, 4)
    return patches.reshape(TOKENS_PER_IMAGE, PATCH_DIM)


def text_model(text_config: dict) -> LlamaForCausalLM:
    return LlamaForCausalLM(LlamaConfig(**text_config))


def projector(hidden_size: int) -> nn.Linear:
    return nn.Linear(PATCH_DIM, hidden_size)


def embed_with_images(llm, vision: nn.Linear, input_ids: torch.Tensor, pixel_values: torch.Tensor | None, image_slots: torch.Tensor):
    """Token embeddings with the positions where ``image_slots`` is True replaced, in order, by the projected
    patches (negative ids, as Phi-3-vision uses for image slots, embed as id 0 first)."""
    embeds = llm.get_input_embeddings()(input_ids.clamp(min=0))
    if pixel_values is not None and pixel_values.numel():
        positions = image_slots.nonzero(as_tuple=False)
        features = vision(pixel_values.reshape(-1, PATCH_DIM).to(embeds.dtype))
        if len(positions) != len(features):
            raise ValueError(f"{len(positions)} image placeholder tokens for {len(features)} image patches")
        embeds = embeds.clone()
        embeds[positions[:, 0], positions[:, 1]] = features
    return embeds

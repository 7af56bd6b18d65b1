"""Test double of Phi-3-vision's configuration (configuration_phi3_v.py of microsoft/Phi-3-vision-128k-instruct
and Phi-3.5-vision-instruct: model_type ``phi3_v``)."""

from transformers import LlamaConfig


class Phi3VConfig(LlamaConfig):
    model_type = "phi3_v"

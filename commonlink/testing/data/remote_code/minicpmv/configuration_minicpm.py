"""Test double of MiniCPM-V 2.6's configuration (openbmb/MiniCPM-V-2_6 configuration_minicpm.py): model_type
``minicpmv``, a text model config and the number of query tokens an image becomes."""

from transformers import PretrainedConfig


class MiniCPMVConfig(PretrainedConfig):
    model_type = "minicpmv"

    def __init__(self, llm_config=None, query_num=4, **kwargs):
        self.llm_config = dict(llm_config or {})
        self.query_num = query_num
        super().__init__(**kwargs)

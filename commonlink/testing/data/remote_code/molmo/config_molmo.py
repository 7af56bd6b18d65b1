"""Test double of Molmo's configuration (config_molmo.py of allenai/Molmo-7B-D-0924: model_type ``molmo``)."""

from transformers import PretrainedConfig


class MolmoConfig(PretrainedConfig):
    model_type = "molmo"

    def __init__(self, llm_config=None, use_position_ids=True, **kwargs):
        self.llm_config = dict(llm_config or {})
        self.use_position_ids = use_position_ids
        super().__init__(**kwargs)

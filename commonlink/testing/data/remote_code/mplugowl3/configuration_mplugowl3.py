"""Test double of mPLUG-Owl3's configuration (configuration_mplugowl3.py of mPLUG/mPLUG-Owl3-*: model_type
``mplugowl3``)."""

from transformers import PretrainedConfig


class mPLUGOwl3Config(PretrainedConfig):
    model_type = "mplugowl3"

    def __init__(self, llm_config=None, **kwargs):
        self.llm_config = dict(llm_config or {})
        super().__init__(**kwargs)

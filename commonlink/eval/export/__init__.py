"""Common-O and association tasks for the harnesses VLM users already run (lmms-eval, VLMEvalKit):
:mod:`.writers` writes their task files, :mod:`.harnesses` is what those files call back (our prompts, parser and
metrics)."""

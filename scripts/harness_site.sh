#!/usr/bin/env bash
# Install the real lmms-eval (and the few light packages its task and evaluator modules import) into a separate
# folder, without touching the toolkit's environment (no torch/transformers reinstall: --no-deps), so that
# tests/test_eval_harnesses.py can run lmms-eval's own TaskManager and simple_evaluate on the exported tasks:
#
#     scripts/harness_site.sh /tmp/commonlink-harness
#     COMMONLINK_HARNESS_SITE=/tmp/commonlink-harness .venv/bin/python -m pytest tests/test_eval_harnesses.py
#
# VLMEvalKit is not on PyPI (it installs from its git repository, with torchvision and many model dependencies,
# into its own environment): docs/eval.md says how; COMMONLINK_VLMEVAL_PYTHON=<that env's python> makes
# tests/test_eval_harnesses.py run it.
set -euo pipefail
SITE="${1:?usage: scripts/harness_site.sh TARGET_DIR}"
PY="${PYTHON:-.venv/bin/python}"
"$PY" -m pip install --quiet --no-deps --target "$SITE" \
  "lmms-eval==0.7.3" pytz loguru tenacity sqlitedict evaluate sacrebleu portalocker tabulate colorama lxml \
  aiohttp multidict yarl propcache aiohappyeyeballs aiosignal frozenlist decord "filelock<4"
echo "lmms-eval installed in $SITE"

#!/usr/bin/env bash
# Install VLMEvalKit from a git checkout into a virtual environment of its own (TARGET_DIR), with commonlink, so that
# the exported datasets run there (docs/eval.md) and the VLMEvalKit tests run:
#
#     git clone https://github.com/open-compass/VLMEvalKit ../VLMEvalKit      # not on PyPI
#     scripts/vlmevalkit_site.sh ../VLMEvalKit .vlmeval-site
#     COMMONLINK_VLMEVAL_PYTHON=.vlmeval-site/bin/python .venv/bin/python -m pytest tests/test_vlmevalkit_api.py
#
# Why an environment of its own, unlike lmms-eval's (scripts/harness_site.sh): `import vlmeval` imports torchvision,
# and PyPI's torchvision is built for PyPI's (CUDA) torch. With the toolkit's CPU torch it fails at import
# ("operator torchvision::nms does not exist") and cannot be left out, so this environment gets PyPI's matching
# torch and torchvision (about 3 GB; they run on a CPU too), installed with pip's --isolated so that a local pip
# configuration pinning a CPU torch wheel does not pick the mismatched pair again. VLMEvalKit's requirements also
# miss rouge_score, which its scorers import.
set -euo pipefail
CHECKOUT="${1:?usage: scripts/vlmevalkit_site.sh VLMEVALKIT_CHECKOUT TARGET_DIR}"
SITE="${2:?usage: scripts/vlmevalkit_site.sh VLMEVALKIT_CHECKOUT TARGET_DIR}"
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python3}"
[ -f "$CHECKOUT/run.py" ] && [ -d "$CHECKOUT/vlmeval" ] || { echo "$CHECKOUT is not a VLMEvalKit checkout (no run.py, vlmeval/)"; exit 1; }
TORCH="${COMMONLINK_VLMEVAL_TORCH:-torch==2.13.0}"

[ -x "$SITE/bin/python" ] || "$PY" -m venv "$SITE"
HPY="$SITE/bin/python"
"$HPY" -m pip install --quiet --disable-pip-version-check --upgrade pip
cert=()
[ -r /etc/ssl/certs/ca-certificates.crt ] && cert=(--cert /etc/ssl/certs/ca-certificates.crt)
# torch and the torchvision built for it, from PyPI (torchvision's own pin picks the matching version)
"$HPY" -m pip install --isolated --quiet --disable-pip-version-check "${cert[@]}" "$TORCH" torchvision
"$HPY" -m pip install --quiet --disable-pip-version-check -e "$CHECKOUT" rouge_score
# commonlink itself (the exported commonlink_vlmeval.py imports it), with its light dependencies
"$HPY" -m pip install --quiet --disable-pip-version-check -e "$REPO"
"$HPY" -c "import torch, torchvision, vlmeval.dataset, commonlink.eval.export.harnesses; print('VLMEvalKit ready:', torch.__version__, torchvision.__version__)"
echo "VLMEvalKit installed in $SITE (COMMONLINK_VLMEVAL_PYTHON=$SITE/bin/python)"

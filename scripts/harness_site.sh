#!/usr/bin/env bash
# Install the real lmms-eval, with its dependencies, into a virtual environment of its own (TARGET_DIR) that also
# sees the toolkit's environment: torch, transformers and commonlink come from there and are never reinstalled or
# changed (torch is pinned to the installed build, so no second, CUDA, torch is pulled), and nothing is installed
# into the toolkit's environment. Then lmms-eval's documented command runs to the end (its results table needs
# pytablewriter, which a --no-deps install left out):
#
#     scripts/harness_site.sh .harness-site          # scripts/setup.sh does this
#     .harness-site/bin/lmms-eval --include_path harness/commonlink_tasks --tasks common_o --model llava_hf ...
#     COMMONLINK_HARNESS_SITE=.harness-site .venv/bin/python -m pytest tests/test_eval_harnesses.py
#
# VLMEvalKit is not on PyPI (it installs from its git repository, with torchvision and many model dependencies,
# into its own environment): docs/eval.md says how; COMMONLINK_VLMEVAL_PYTHON=<that env's python> makes
# tests/test_eval_harnesses.py run it.
set -euo pipefail
SITE="${1:?usage: scripts/harness_site.sh TARGET_DIR}"
PY="${PYTHON:-.venv/bin/python}"
# video-legacy: decord, which lmms-eval's llava_hf and qwen2_vl model modules import; filelock<4: lmms-eval's
# evaluator imports filelock._api, gone in filelock 4 (not in its declared requirements).
LMMS_EVAL="${COMMONLINK_LMMS_EVAL:-lmms-eval[video-legacy]==0.7.3}"

if [ -d "$SITE/lmms_eval" ] && [ ! -x "$SITE/bin/python" ]; then
  echo "removing the old --no-deps install in $SITE"
  rm -rf "$SITE"
fi
[ -x "$SITE/bin/python" ] || "$PY" -m venv "$SITE"
HPY="$SITE/bin/python"
main_site=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
harness_site=$("$HPY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
# addsitedir (not a bare path line) so the toolkit's own .pth files (editable commonlink) are read too; the
# harness's own site-packages stay first on sys.path.
echo "import site; site.addsitedir('$main_site')" > "$harness_site/_commonlink_toolkit_env.pth"
constraints="$SITE/constraints.txt"
"$PY" -c "import importlib.metadata as m; print('torch==' + m.version('torch').split('+')[0])" > "$constraints"
"$HPY" -m pip install --quiet --disable-pip-version-check -c "$constraints" "$LMMS_EVAL" "filelock<4"
# torchvision must be built for the installed torch: PyPI's (CUDA) build fails to import with a CPU torch
# ("operator torchvision::nms does not exist"), which breaks transformers' image processors. Take the build from
# PyTorch's index for torch's local tag (+cpu, +cu124, ...); failing that, go without it (transformers and
# lmms-eval's image models then run without torchvision, as with a toolkit environment that lacks it).
if ! "$HPY" -c "import torchvision" >/dev/null 2>&1; then
  tag=$("$PY" -c "import torch; v = torch.__version__; print(v.split('+')[1] if '+' in v else '')")
  tv=$("$HPY" -c "import importlib.metadata as m; print(m.version('torchvision'))" 2>/dev/null || true)
  if [ -n "$tag" ] && [ -n "$tv" ]; then
    "$HPY" -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall \
      --index-url "https://download.pytorch.org/whl/$tag" "torchvision==${tv%%+*}" >/dev/null 2>&1 || true
  fi
  if ! "$HPY" -c "import torchvision" >/dev/null 2>&1; then
    echo "torchvision $tv does not match torch ($("$PY" -c 'import torch; print(torch.__version__)')) and no matching build could be installed: removed from $SITE"
    "$HPY" -m pip uninstall --quiet -y torchvision
  fi
fi
"$HPY" -c "import lmms_eval, pytablewriter, decord, torch, commonlink" # the documented command's imports, and ours
echo "lmms-eval installed in $SITE (run it as $SITE/bin/lmms-eval)"

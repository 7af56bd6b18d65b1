#!/usr/bin/env bash
# One-step setup on a fresh machine: system libraries for headless rendering (when root and apt exist),
# a virtual environment in .venv, and commonlink with every extra that runs on a CPU.
# Usage: ./scripts/setup.sh            (idempotent; rerun after pulling)
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}

if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
  need=""
  for pkg in libegl1 libegl-mesa0 libgl1-mesa-dri libgl1; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need="$need $pkg"
  done
  if [ -n "$need" ]; then
    echo "==> installing system packages for headless OpenGL:$need"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null
  fi
  # Headless Chromium and its WebDriver for the browser tests of the HTML eval report (skipped without them).
  browser=""
  for pkg in chromium chromium-driver; do
    dpkg -s "$pkg" >/dev/null 2>&1 || browser="$browser $pkg"
  done
  if [ -n "$browser" ]; then
    echo "==> installing system packages for the report's browser tests:$browser"
    { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $browser >/dev/null; } \
      || echo "    (could not install$browser: the browser tests will be skipped)"
  fi
fi

if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv"
  "$PY" -m venv .venv
fi
PIP=".venv/bin/python -m pip"
$PIP install -q --upgrade pip

# torch first and pinned to the CPU build; an unpinned torch would pull a multi-GB CUDA build.
TORCH_SPEC=${COMMONLINK_TORCH:-torch==2.13.0}
.venv/bin/python -c "import torch" >/dev/null 2>&1 || { echo "==> installing $TORCH_SPEC"; $PIP install -q "$TORCH_SPEC"; }

echo "==> installing commonlink[all] (the test extra brings pytest and ruff, which the test suite runs)"
$PIP install -q -e ".[all]"
# pyrender pins PyOpenGL 3.1.0, which is broken with EGL on current Python; newer PyOpenGL works.
$PIP install -q "PyOpenGL>=3.1.7" 2>/dev/null
# The real lmms-eval with its dependencies, in an environment of its own that shares this one's torch (nothing is
# installed into .venv): .harness-site/bin/lmms-eval runs the exported tasks (docs/eval.md), and the harness tests
# use it (they skip without it).
if [ ! -x .harness-site/bin/lmms-eval ] || [ ! -x .harness-site/bin/python ]; then  # (an old --no-deps install has no python)
  echo "==> installing lmms-eval into .harness-site (.harness-site/bin/lmms-eval)"
  ./scripts/harness_site.sh .harness-site >.harness-site.log 2>&1 \
    || echo "    (could not install lmms-eval, see .harness-site.log: the harness tests will be skipped)"
fi
echo "==> ready: $(.venv/bin/commonlink --version)"

#!/usr/bin/env bash
# Rebuilds this example: renders two small synthetic catalogs with the embedded offline renderer, measures
# object areas from the render masks, samples a main and a challenge split, builds the release, and copies
# its card and figures here (the parquet shards are not committed).
# Usage: docs/example_release/make_example.sh [WORK_DIR]      (from the repository root; about a minute on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/../.."
WORK=${1:-$(mktemp -d)}
CL=.venv/bin/commonlink

$CL synth --out "$WORK/synth_main" --scenes 16 --objects 3-7 --resolution 384x384 --seed 0
$CL synth --out "$WORK/synth_challenge" --scenes 8 --objects 8-16 --resolution 384x384 --seed 1
$CL stats "$WORK/synth_main"
$CL stats "$WORK/synth_challenge"
$CL pairs "$WORK/synth_main" --out "$WORK/main.jsonl" --count 48 --seed 0
$CL pairs "$WORK/synth_challenge" --out "$WORK/challenge.jsonl" --split challenge --count 24 --seed 0
$CL release build "$WORK/main.jsonl" "$WORK/challenge.jsonl" --out "$WORK/release" \
    --name "Common-O example (synthetic)" --version 0.1.0 --no-progress

rm -rf docs/example_release/figures
mkdir -p docs/example_release/figures
cp "$WORK/release/README.md" docs/example_release/README.md
cp "$WORK/release/figures/"*.png docs/example_release/figures/
echo "example card and figures copied from $WORK/release"

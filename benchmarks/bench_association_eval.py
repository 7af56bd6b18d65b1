"""Association eval benchmark (issue: association protocol).

1. Model requests per scored chain step (target: <= 2 — one selection and one deduction, no more), measured on
   chains run with the random baseline.
2. Wall time of 16 chains advanced in lockstep (one batch per step) against the same 16 chains run one by one,
   with a tiny random LLaVA on CPU through the real transformers backend (target: lockstep >= 2x faster). The
   step logs of both runs are compared: batching must not change a single answer.

    .venv/bin/python benchmarks/bench_association_eval.py [--chains 16] [--steps 6] [--max-new-tokens 8]
"""

from __future__ import annotations

import _common  # noqa: F401  (puts the repository root on sys.path)

# isort: split

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from _results import add_contract_arguments, result_row, write_rows


def build_chains(root: Path, chains: int, steps: int) -> Path:
    from commonlink.fileio import sha256_file
    from commonlink.kinds.association.chains import ChainConfig, build_chain_files
    from commonlink.kinds.association.format import LabelledImage

    rng = np.random.default_rng(0)
    concepts = ["metal", "furry", "ripe", "painted"]
    images = []
    (root / "imgs").mkdir(parents=True)
    for i in range(240):
        labels = [str(c) for c in rng.choice(concepts, size=int(rng.integers(1, 3)), replace=False)]
        path = root / "imgs" / f"{i}.png"
        Image.fromarray(rng.integers(0, 255, (48, 48, 3), dtype=np.uint8)).save(path)
        images.append(
            LabelledImage(
                id=f"img{i:04d}",
                labels=labels,
                width=400,
                height=400,
                # an image folder named as the chains' catalog, with the file's hash: the loader reads nothing else
                origin={
                    "type": "file",
                    "catalog": str(root / "imgs"),
                    "path": str(path),
                    "sha256": sha256_file(path),
                },
            )
        )
    cfg = ChainConfig(
        seed=1,
        concepts=concepts,
        pairs=[["metal", "furry"]],
        chains_per_concept=chains // len(concepts),
        max_steps=steps,
        warmup=3,
        single_step_per_concept=2,
        deductions_per_concept=2,
        min_pool=3,
        tasks=["synchronous"],
    )
    build_chain_files(images, root / "chains", cfg, progress=False)
    return root / "chains"


class ForceCorrect:
    """Runs the wrapped model on every request (so the timing is the model's), then replaces its answer with the
    correct one: a tiny random model answers garbage and would end every chain at its first step, which would
    measure only one step per chain."""

    def __init__(self, inner, chains):
        self.inner, self.info = inner, inner.info
        self.answers = {(c.id, s.index): s for c in chains for s in c.steps}

    @property
    def generate_seconds(self):
        return self.inner.generate_seconds

    def generate(self, requests, settings):
        self.inner.generate(requests, settings)
        out = []
        for r in requests:
            chain, step, kind, _ = r.id.rsplit("/", 3)
            s = self.answers[(chain, int(step))]
            out.append(f"Image{s.answer + 1}" if kind == "select" else ", ".join(s.gold))
        return out

    def close(self):
        self.inner.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chains", type=int, default=16)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=8)
    add_contract_arguments(parser)
    args = parser.parse_args()
    if args.quick:
        args.chains, args.steps = 8, 4

    from commonlink.eval.backends import GenerationSettings, load_backend
    from commonlink.eval.cache import PredictionCache
    from commonlink.kinds.association.loader import open_association
    from commonlink.kinds.association.task import Asker, AssociationSettings, run_chains
    from tests.fixtures.tiny_models import build_tiny_llava

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data = build_chains(tmp, args.chains, args.steps)
        chains = list(open_association(data, "synchronous"))[: args.chains]
        settings = AssociationSettings(memory="structm", max_steps=args.steps)

        # 1. requests per scored step, random baseline over all chains, under each protocol: the paper's warm-up
        # (3 steps on each concept, the model's own deductions as memory) is unscored, so it costs more per step
        per_protocol = {}
        for protocol in ("strict", "paper"):
            baseline = load_backend("transformers", "random")
            asker = Asker([baseline], PredictionCache(tmp / f"c0-{protocol}.jsonl"), GenerationSettings(), ["r"], 64)
            protocol_settings = AssociationSettings(memory="structm", max_steps=args.steps, protocol=protocol)
            runs = run_chains(chains, asker, protocol_settings, progress=False)
            scored = sum(r.scored for r in runs)
            per_protocol[protocol] = (asker.requests_sent / scored, scored)
        per_step, scored = per_protocol["strict"]

        # 2. lockstep vs one by one, tiny LLaVA on CPU
        model_dir = build_tiny_llava(tmp / "llava", layers=2)
        backend = ForceCorrect(load_backend("transformers", str(model_dir)), chains)
        gen = GenerationSettings(max_new_tokens=args.max_new_tokens)
        warm = Asker([backend], PredictionCache(tmp / "warm.jsonl"), gen, ["w"], len(chains))
        run_chains(chains[:2], warm, AssociationSettings(memory="structm", max_steps=1), progress=False)

        backend.inner.generate_seconds = 0.0
        start = time.perf_counter()
        batched_asker = Asker([backend], PredictionCache(tmp / "b.jsonl"), gen, ["m"], len(chains))
        batched = run_chains(chains, batched_asker, settings, progress=False)
        batched_s = time.perf_counter() - start

        start = time.perf_counter()
        single = []
        for chain in chains:
            one_asker = Asker([backend], PredictionCache(tmp / f"s-{chain.id}.jsonl"), gen, ["m"], 1)
            single.extend(run_chains([chain], one_asker, settings, progress=False))
        single_s = time.perf_counter() - start
        same = [r.log for r in batched] == [r.log for r in single]

    report = {
        "requests_per_scored_step": round(per_step, 4),
        "requests_per_scored_step_paper_protocol": round(per_protocol["paper"][0], 4),
        "target_requests_per_step": 2,
        "scored_steps": scored,
        "chains": len(chains),
        "model_steps_run": sum(r.scored for r in batched),
        "lockstep_s": round(batched_s, 3),
        "one_by_one_s": round(single_s, 3),
        "speedup": round(single_s / batched_s, 2),
        "target_speedup": 2.0,
        "identical_step_logs": same,
    }
    print(json.dumps(report, indent=2))
    bench = "bench_association_eval.py"
    write_rows(
        args.json,
        [
            result_row(
                bench,
                "model requests per scored chain step (random baseline, --protocol strict)",
                per_step,
                "requests",
                target="<= 2",
            ),
            result_row(
                bench,
                "model requests per scored chain step (random baseline, --protocol paper: its unscored warm-up "
                f"counted; {per_protocol['paper'][1]} scored steps)",
                per_protocol["paper"][0],
                "requests",
            ),
            result_row(
                bench,
                f"{len(chains)} chains x {args.steps} steps in lockstep, tiny LLaVA on CPU",
                batched_s,
                "s",
                peer="the same chains one by one (identical step logs: " + ("yes" if same else "NO") + ")",
                ratio=single_s / batched_s,
                target=">= 2",
            ),
        ],
    )


if __name__ == "__main__":
    main()

"""Optional object-similarity analyses of a Common-O run (paper §4.2 and Appendix Table 6).

* :func:`object_similarity_analysis` (Table 6): for each example with two or more ground-truth common
  objects, embed every object name, take the greatest pairwise cosine similarity, and correlate it (Pearson r,
  point-biserial) with whether the model was correct. Examples with fewer than two common objects have no pair
  and are left out (``n`` says how many were used).
* :func:`hallucination_similarity_analysis` (§4.2: "models are more prone to hallucinate when similar objects
  are present in the scene"): per example, the *distractor similarity* -- the greatest cosine similarity between
  a distractor (a choice not in common, "No objects are in common" aside) and an object in common -- stored on
  the example's record (``distractor_similarity`` in predictions.jsonl); then the hallucination rate per
  similarity bin (equal-count bins by rank) and its Pearson r with hallucinating at least once. The paper
  states the finding but prints no such analysis, so the bins and the per-example measure are ours.

Embeddings: ``--similarity-model PATH`` loads any transformers encoder (``AutoTokenizer`` + ``AutoModel``,
mean pooling over tokens, L2-normalised; sentence-transformers folders work too since they hold such a
model). The paper used NV-Embed-v2. Without a model, ``char-ngram`` uses hashed character trigram counts:
a *lexical* similarity ("silver knife" ~ "silver whisk"), not a semantic one; results say which was used.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable, Sequence

import numpy as np

from commonlink.constants import NO_COMMON_OBJECTS
from commonlink.errors import BackendError, MissingDependencyError
from commonlink.eval.metrics import pearson
from commonlink.kinds.common_o.metrics import num_common, object_hallucinations

Embed = Callable[[list[str]], np.ndarray]
CHAR_NGRAM = "char-ngram"


def char_ngram_embedder(n: int = 3, dim: int = 4096) -> Embed:
    def embed(texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), dim))
        for row, text in enumerate(texts):
            padded = f" {text.lower().strip()} "
            for k in range(max(1, len(padded) - n + 1)):
                out[row, zlib.crc32(padded[k : k + n].encode()) % dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1, norms)

    return embed


def transformers_embedder(path: str, *, batch_size: int = 64) -> Embed:
    try:
        import torch
        from transformers import AutoModel, AutoTokenizer
    except ImportError as exc:
        raise MissingDependencyError("transformers", "eval", "Object-similarity embeddings") from exc
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModel.from_pretrained(path).eval()
    except (OSError, ValueError) as exc:
        raise BackendError(
            f"Could not load the embedding model {path!r} ({exc}).",
            "Give a folder with a transformers encoder, or omit --similarity-model.",
        ) from exc

    def embed(texts: list[str]) -> np.ndarray:
        chunks = []
        for start in range(0, len(texts), batch_size):
            batch = tokenizer(texts[start : start + batch_size], padding=True, truncation=True, return_tensors="pt")
            with torch.inference_mode():
                hidden = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
            chunks.append(torch.nn.functional.normalize(pooled, dim=-1).float().numpy())
        return np.concatenate(chunks) if chunks else np.zeros((0, 1))

    return embed


def make_embedder(model: str | None) -> tuple[str, Embed]:
    if not model or model == CHAR_NGRAM:
        return CHAR_NGRAM, char_ngram_embedder()
    return str(model), transformers_embedder(str(model))


def max_pairwise_similarity(names: Sequence[str], vectors: dict[str, np.ndarray]) -> float:
    return max(float(vectors[a] @ vectors[b]) for a, b in itertools.combinations(names, 2))


def object_similarity_analysis(
    records: Sequence[dict], model: str | None = None, *, embedder: tuple[str, Embed] | None = None
) -> dict:
    """Pearson r between the greatest pairwise similarity of the common objects and correctness.

    ``embedder`` (from :func:`make_embedder`) reuses an embedding model loaded earlier; else ``model`` is loaded.
    """
    name, embed = embedder or make_embedder(model)
    usable = [r for r in records if num_common(r) >= 2]
    vocabulary = sorted({obj for r in usable for obj in r["ground_truth"]})
    vectors = dict(zip(vocabulary, embed(vocabulary))) if vocabulary else {}
    similarity = [max_pairwise_similarity(r["ground_truth"], vectors) for r in usable]
    correct = [float(r["correct"]) for r in usable]
    result = pearson(similarity, correct)
    result.update(
        embedding=name,
        examples_used=len(usable),
        mean_similarity=float(np.mean(similarity)) if similarity else None,
    )
    return result


#: Equal-count similarity bins of the hallucination analysis (fewer when fewer examples have a value).
SIMILARITY_BINS = 4


def distractor_similarity(record: dict, vectors: dict[str, np.ndarray]) -> float | None:
    """The greatest similarity between a distractor and an object in common (None: no common object or no
    distractor)."""
    common = [o for o in record["ground_truth"] if o != NO_COMMON_OBJECTS]
    distractors = [c for c in record["choices"] if c not in set(record["ground_truth"]) and c != NO_COMMON_OBJECTS]
    if not common or not distractors:
        return None
    return max(float(vectors[d] @ vectors[o]) for d in distractors for o in common)


def _bin_stats(group: list[dict], sims: list[float]) -> dict:
    n = len(group)
    return {
        "low": float(min(sims)),
        "high": float(max(sims)),
        "n": n,
        "hallucination_rate": sum(r["hallucinated"] / max(1, r["num_choices"]) for r in group) / n,
        "hallucination_1plus": sum(r["hallucinated"] >= 1 for r in group) / n,
        "object_hallucination_1plus": sum(object_hallucinations(r) >= 1 for r in group) / n,
        "accuracy": sum(bool(r["correct"]) for r in group) / n,
    }


def hallucination_similarity_analysis(
    records: Sequence[dict],
    model: str | None = None,
    *,
    embedder: tuple[str, Embed] | None = None,
    bins: int = SIMILARITY_BINS,
) -> dict:
    """Hallucination by distractor similarity (see the module doc); sets ``distractor_similarity`` on each record."""
    name, embed = embedder or make_embedder(model)
    vocabulary = sorted({c for r in records for c in (*r["choices"], *r["ground_truth"]) if c != NO_COMMON_OBJECTS})
    vectors = dict(zip(vocabulary, embed(vocabulary))) if vocabulary else {}
    for record in records:
        record["distractor_similarity"] = distractor_similarity(record, vectors)
    usable = sorted(
        (r for r in records if r["distractor_similarity"] is not None), key=lambda r: r["distractor_similarity"]
    )
    sims = [r["distractor_similarity"] for r in usable]
    groups = (
        [list(g) for g in np.array_split(np.arange(len(usable)), min(bins, len(usable))) if len(g)] if usable else []
    )
    result = pearson(sims, [float(r["hallucinated"] >= 1) for r in usable])
    result.update(
        embedding=name,
        measure="greatest cosine similarity between a distractor and an object in common",
        examples_used=len(usable),
        mean_similarity=float(np.mean(sims)) if sims else None,
        bins=[_bin_stats([usable[k] for k in g], [sims[k] for k in g]) for g in groups],
    )
    return result

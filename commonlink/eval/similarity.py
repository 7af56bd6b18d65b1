"""Optional object-similarity analysis (paper §4.2, Table 6).

For each example with two or more ground-truth common objects, embed every object name, take the greatest
pairwise cosine similarity, and correlate it (Pearson r, point-biserial) with whether the model was correct.
Examples with fewer than two common objects have no pair and are left out (``n`` says how many were used).

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

from commonlink.errors import BackendError, MissingDependencyError
from commonlink.eval.metrics import num_common, pearson

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
        raise BackendError(f"Could not load the embedding model {path!r} ({exc}).", "Give a folder with a transformers encoder, or omit --similarity-model.") from exc

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


def object_similarity_analysis(records: Sequence[dict], model: str | None = None, *, embedder: tuple[str, Embed] | None = None) -> dict:
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

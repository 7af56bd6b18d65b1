"""``commonlink human agreement``: how often people agree with the labels and with each other (the figures the
papers report: Common-O's "84% agreement" in its datasheet, Labyrinth's expert rows), with standard errors.

An *item* is one question (a request id); an answer is the set of choices picked. Figures:

* **label agreement**: the share of answers that are correct (the task's own rule: the exact set of correct
  choices, or for an association deduction the run's deduction rule), per annotator and pooled over all answers;
* **pairwise agreement**: for each pair of annotators, the share of the items both answered where they picked the
  same set; and its mean over pairs;
* **Fleiss' kappa** over the items every annotator answered (categories: the distinct answer sets), ``(P - Pe) /
  (1 - Pe)`` with ``P`` the mean per-item agreement ``(sum_j n_ij^2 - n) / (n (n - 1))`` and ``Pe = sum_j p_j^2``
  (Fleiss 1971); undefined (``None``) when every answer falls in one category.

Standard errors: the standard deviation (ddof 1) of the figure over ``n_boot`` bootstrap resamples of the items
(with replacement, seeded: ``rng_for(seed, "human-agreement")``), so answers to the same item stay together.
"""

from __future__ import annotations

import itertools
import os
from collections import Counter
from collections.abc import Sequence

import numpy as np

from commonlink.errors import InputError
from commonlink.human.answers import HumanAnswers, finished_units, read_answers
from commonlink.human.items import StudyQuestion, study_units
from commonlink.seeding import rng_for

SE_METHOD = (
    "bootstrap over items: standard deviation (ddof 1) of the figure over {n} resamples of the items with "
    "replacement, seed {seed}"
)


def fleiss_kappa(table: Sequence[Sequence[int]]) -> float | None:
    """Fleiss' kappa of a table: one row per item, ``n_ij`` = raters who put item ``i`` in category ``j``, every
    row summing to the same number of raters ``n >= 2``. ``None`` when chance agreement is 1 (one category)."""
    counts = np.asarray(table, dtype=float)
    if counts.ndim != 2 or len(counts) == 0:
        return None
    n = counts.sum(axis=1)
    if not np.all(n == n[0]) or n[0] < 2:
        raise ValueError("every item needs the same number of raters, at least 2")
    raters = n[0]
    p_item = ((counts**2).sum(axis=1) - raters) / (raters * (raters - 1))
    p_cat = counts.sum(axis=0) / counts.sum()
    p_bar, p_e = p_item.mean(), float((p_cat**2).sum())
    return None if p_e >= 1 else float((p_bar - p_e) / (1 - p_e))


def _figures(items: list[str], answers: list[dict[str, tuple]], correct: list[dict[str, bool]]) -> dict:
    """Every figure over ``items`` (a list that may repeat items, as a bootstrap resample does)."""
    out: dict = {}
    per = []
    for k, given in enumerate(correct):
        marks = [given[i] for i in items if i in given]
        per.append(sum(marks) / len(marks) if marks else None)
        out[f"label/{k}"] = per[-1]
    pooled = [given[i] for given in correct for i in items if i in given]
    out["label/pooled"] = sum(pooled) / len(pooled) if pooled else None
    pairs = []
    for a, b in itertools.combinations(range(len(answers)), 2):
        both = [i for i in items if i in answers[a] and i in answers[b]]
        value = sum(answers[a][i] == answers[b][i] for i in both) / len(both) if both else None
        out[f"pair/{a}/{b}"] = value
        if value is not None:
            pairs.append(value)
    out["pair/mean"] = sum(pairs) / len(pairs) if pairs else None
    common = [i for i in items if all(i in given for given in answers)]
    if len(answers) >= 2 and common:
        categories = sorted({given[i] for given in answers for i in common})
        table = [[Counter(given[i] for given in answers)[c] for c in categories] for i in common]
        out["kappa"] = fleiss_kappa(table)
    else:
        out["kappa"] = None
    return out


def _bootstrap_se(items: list[str], answers, correct, *, n_boot: int, seed: int) -> dict:
    rng = rng_for(seed, "human-agreement")
    draws: dict[str, list[float]] = {}
    for _ in range(n_boot):
        sample = [items[k] for k in rng.integers(0, len(items), len(items))]
        for key, value in _figures(sample, answers, correct).items():
            if value is not None:
                draws.setdefault(key, []).append(value)
    return {k: float(np.std(v, ddof=1)) if len(v) > 1 else None for k, v in draws.items()}


def _figure(values: dict, ses: dict, key: str, n: int) -> dict:
    value = values.get(key)
    return {"value": value, "se": ses.get(key) if value is not None else None, "n": n}


def agreement(
    answer_files: Sequence[HumanAnswers], questions: dict[str, StudyQuestion], *, n_boot: int = 1000, seed: int = 0
) -> dict:
    """The agreement figures of several annotators' answers (see the module doc); ``questions``: by item."""
    names = [a.annotator for a in answer_files]
    if len(set(names)) != len(names):
        raise InputError(f"two answers files are by the same annotator ({names}).", "Give each annotator's file once.")
    if n_boot < 2:
        raise InputError(f"--bootstrap {n_boot} must be at least 2.")
    answers = [{i: tuple(a.answer) for i, a in f.answers.items()} for f in answer_files]
    correct = [{i: questions[i].is_correct(list(a)) for i, a in given.items()} for given in answers]
    items = sorted(set().union(*answers))
    values = _figures(items, answers, correct)
    ses = _bootstrap_se(items, answers, correct, n_boot=n_boot, seed=seed)
    common = [i for i in items if all(i in given for given in answers)]
    pairs = []
    for a, b in itertools.combinations(range(len(names)), 2):
        both = sum(1 for i in items if i in answers[a] and i in answers[b])
        pairs.append({"annotators": [names[a], names[b]], **_figure(values, ses, f"pair/{a}/{b}", both)})
    result = {
        "annotators": names,
        "items": {"answered": len(items), "answered_by_all": len(common)},
        "label_agreement": {
            "pooled": _figure(values, ses, "label/pooled", sum(len(c) for c in correct)),
            "per_annotator": {n: _figure(values, ses, f"label/{k}", len(correct[k])) for k, n in enumerate(names)},
        },
        "pairwise_agreement": pairs,
        "mean_pairwise_agreement": _figure(values, ses, "pair/mean", len(pairs)),
        "fleiss_kappa": _figure(values, ses, "kappa", len(common)),
        "se_method": SE_METHOD.format(n=n_boot, seed=seed),
    }
    result["card_sentence"] = card_sentence(result)
    return result


def _pct(figure: dict) -> str:
    se = f" ± {100 * figure['se']:.1f}" if figure.get("se") is not None else ""
    return f"{100 * figure['value']:.1f}%{se}"


def card_sentence(result: dict) -> str:
    """The figure in one sentence for the card's human-validation answer (``release card-info``)."""
    label = result["label_agreement"]["pooled"]
    text = (
        f"{len(result['annotators'])} annotator(s) answered {result['items']['answered']} questions with the "
        f"`commonlink human study` page; their answers agreed with the labels on {_pct(label)} of {label['n']} "
        "answers"
    )
    if len(result["annotators"]) >= 2:
        pair, kappa = result["mean_pairwise_agreement"], result["fleiss_kappa"]
        text += f"; with each other on {_pct(pair)} (mean over pairs)" if pair["value"] is not None else ""
        if kappa["value"] is not None:
            se = f" ± {kappa['se']:.3f}" if kappa["se"] is not None else ""
            text += f"; Fleiss' kappa {kappa['value']:.3f}{se} over the {kappa['n']} questions all answered"
    return text + " (± one standard error, bootstrap over questions)."


def agreement_of_files(
    paths: Sequence[str | os.PathLike],
    data: str | os.PathLike,
    split: str,
    *,
    revision: str | None = None,
    n_boot: int = 1000,
    seed: int = 0,
) -> dict:
    """Read and check every answers file against ``data``'s ``split`` (as ``eval score`` does), then
    :func:`agreement`."""
    files = [read_answers(p) for p in paths]
    if not files:
        raise InputError("no answers file given.", "Give two or more files exported from the study page.")
    specs = {repr(sorted(f.header["spec"].items())) for f in files}
    if len(specs) > 1:
        raise InputError(
            "the answers files come from studies with different settings (task, split, image size or protocol).",
            "Compare answers to the same study settings.",
        )
    dataset, units = study_units(data, files[0].spec, revision=revision, pixels=False)
    for f in files:
        if f.header["split"] != split or f.header["fingerprint"] != dataset.fingerprint:
            raise InputError(
                f"{f.path}: the answers are for {f.header['split']!r} of data {f.header['fingerprint']}, not "
                f"{split!r} of {dataset.source_name} ({dataset.fingerprint}).",
                "Give the release and split the study was built from (--data, --split).",
            )
        finished_units(f, units)  # every answer checked: known item, valid pick, no step after a chain ended
    questions = {q.id: q for u in units for q in u.questions}
    result = agreement(files, questions, n_boot=n_boot, seed=seed)
    result.update(source=str(dataset.source_name), split=split, fingerprint=dataset.fingerprint)
    return result


__all__ = ["SE_METHOD", "agreement", "agreement_of_files", "card_sentence", "fleiss_kappa"]

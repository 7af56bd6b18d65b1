"""Weight-free baseline "models": ``random`` and ``none``.

* ``none`` always answers that nothing is shared: ``Answer: <letter of "No objects are in common">`` for a
  Common-O question, ``No`` for a yes/no question.
* ``random`` picks uniformly among the valid answers, seeded per row (``rng_for(seed, "random", row id)``):
  for a multi-select question every object choice is included with probability 1/2 and an empty pick means
  "No objects are in common" (so each valid answer has equal chance); otherwise one choice at random.

They answer in the same text format as a model, so their outputs go through the same parser and scorer.
"""

from __future__ import annotations

from collections.abc import Sequence

from commonlink.constants import NO_COMMON_OBJECTS
from commonlink.errors import InputError
from commonlink.eval.backends.base import (
    BackendInfo,
    GenerationRequest,
    GenerationSettings,
    RequestFailure,
)
from commonlink.formats.choices import letters
from commonlink.seeding import rng_for

BASELINES = ("random", "none")


def planned_info(name: str, **_) -> BackendInfo:
    return BackendInfo(
        backend="baseline",
        model=name,
        fingerprint=f"baseline:{name}",
        batch_invariant=True,
        default_batch_size=64,
        uses_images=False,
    )


class BaselineBackend:
    planned_info = staticmethod(planned_info)
    takes_options = False

    def __init__(self, name: str):
        if name not in BASELINES:
            raise InputError(f"Unknown baseline {name!r}.", f"Use one of {', '.join(BASELINES)}.")
        self.name = name
        self.generate_seconds = 0.0
        self.info = planned_info(name)

    def generate(
        self, requests: Sequence[GenerationRequest], settings: GenerationSettings
    ) -> list[str | RequestFailure]:
        return [self._answer(r, settings.seed) for r in requests]

    def _answer(self, request: GenerationRequest, seed: int) -> str:
        choices = request.choices
        if not choices:
            raise InputError(f"The {self.name} baseline needs the request's choices ({request.id} has none).")
        labels = letters(len(choices))
        if self.name == "none":
            if NO_COMMON_OBJECTS in choices:
                return f"Answer: {labels[choices.index(NO_COMMON_OBJECTS)]}"
            lowered = [c.lower() for c in choices]
            if "no" in lowered:
                return choices[lowered.index("no")].capitalize()
            raise InputError(
                f"The none baseline cannot answer {request.id}: no 'No objects are in common' or 'no' choice."
            )
        rng = rng_for(seed, "random", request.id)
        if not request.multi_select:
            # One pick, named as the choice itself ("Yes", "Image2"): protocols without letters parse names.
            pick = choices[int(rng.integers(len(choices)))]
            return pick.capitalize() if pick.lower() in ("yes", "no") else pick
        if NO_COMMON_OBJECTS not in choices:
            # Unlettered multi-select (association deduction): a non-empty random subset, by name.
            named = [c for c in choices if rng.random() < 0.5] or [choices[int(rng.integers(len(choices)))]]
            return ", ".join(named)
        objects = [k for k, c in enumerate(choices) if c != NO_COMMON_OBJECTS]
        while True:
            picked = [k for k in objects if rng.random() < 0.5]
            if picked:
                break
            if NO_COMMON_OBJECTS in choices:
                picked = [choices.index(NO_COMMON_OBJECTS)]
                break
        return "Answer: " + ", ".join(labels[k] for k in sorted(picked))

    def close(self) -> None:
        pass

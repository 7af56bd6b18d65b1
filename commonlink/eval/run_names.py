"""What tables and reports call a run: its recorded ``run_name`` (``--run-name``), else a name made from the
model(s) and the settings that set the run apart (:func:`default_run_name`)."""

from __future__ import annotations

import unicodedata
from pathlib import Path

from commonlink import registry
from commonlink.errors import InputError

__all__ = ["RUN_NAME_MAX", "check_run_name", "default_run_name", "model_names", "run_name"]

#: The longest run name (``--run-name``) accepted, in characters.
RUN_NAME_MAX = 120


def check_run_name(name: str | None) -> str | None:
    """``name`` when it can name a run in tables and reports: not empty, one line of at most :data:`RUN_NAME_MAX`
    characters, no control characters (line breaks, tabs, bidirectional controls: Unicode Cc, Cf, Zl, Zp);
    ``None`` stays ``None`` (the default name). An :class:`InputError` otherwise, the same for the API and CLI."""
    if name is None:
        return None
    fix = "Pass a short name on one line, e.g. --run-name 'qwen2-vl memory'."
    if not isinstance(name, str) or not name.strip():
        raise InputError(f"--run-name {name!r} is empty.", fix)
    controls = sorted({c for c in name if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")})
    if controls:
        shown = ", ".join(f"U+{ord(c):04X}" for c in controls)
        raise InputError(
            f"--run-name {name!r} holds a control character ({shown}); a run name is one line of visible text.", fix
        )
    if len(name) > RUN_NAME_MAX:
        raise InputError(f"--run-name is {len(name)} characters long; the most is {RUN_NAME_MAX}.", fix)
    return name


def model_names(results: dict) -> list[str]:
    models = results.get("models") or [results.get("model") or "?"]
    # a local folder shows as its name; a Hub id (owner/name) as it is
    return [Path(m).name if str(m).startswith(("/", ".", "~")) or str(m).count("/") > 1 else str(m) for m in models]


def default_run_name(results: dict) -> str:
    """The model(s) and the settings that set this run apart: ``MODEL``, then what the run's task names
    (:attr:`commonlink.registry.TaskInfo.run_name_parts`: a prompt variant, a memory, ...), then for any task
    ``T=...`` when sampling, ``temperature not sent`` when the backend's rules dropped the temperature asked."""
    parts = ["+".join(model_names(results))]
    info = registry.task_for_results(str(results.get("task", "")))
    if info is not None:
        parts += info.run_name_parts(results)
    temperature = (results.get("generation") or {}).get("temperature") or 0
    if "temperature" in (results.get("generation_not_sent") or {}):  # the name says only what was sent
        parts += ["temperature not sent"] * (temperature > 0)
    elif temperature > 0:
        parts.append(f"T={temperature:g}")
    return " ".join(parts)


def run_name(results: dict) -> str:
    """What tables and reports call a run: its recorded ``run_name``, else :func:`default_run_name`."""
    return str(results.get("run_name") or default_run_name(results))

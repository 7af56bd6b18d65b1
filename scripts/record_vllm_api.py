"""Record the parts of vLLM's public API that the vllm backend uses, from a downloaded wheel (no install).

vLLM cannot be installed next to the toolkit's torch (it pins its own), and it needs a GPU to run, so the test
double ``tests.fixtures.vllm_double`` stands in for it in the test suite. This script reads the real
wheel's *source* with ``ast`` (nothing is imported or executed) and writes what the double must match:

* the signatures of ``LLM.__init__``, ``LLM.chat`` and ``LLM.generate`` (parameter names, kinds, defaults),
* the fields of ``SamplingParams`` and their defaults,
* the field names of ``EngineArgs`` (what ``LLM(**kwargs)`` accepts beyond its own parameters),
* the content-part types ``LLM.chat`` accepts in a message,
* the error text vLLM raises when a prompt has more images than ``limit_mm_per_prompt`` allows.

    pip download --no-deps --only-binary :all: vllm -d /tmp/vllm-wheel
    python scripts/record_vllm_api.py /tmp/vllm-wheel/vllm-*.whl tests/fixtures/data/vllm_api.json

``tests/test_eval_vllm.py`` then checks that the double's signatures equal the recorded ones.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import zipfile
from pathlib import Path


def _params(func: ast.FunctionDef) -> list[dict]:
    args = func.args
    out = []
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for arg, default in zip(positional, defaults):
        kind = "POSITIONAL_ONLY" if arg in args.posonlyargs else "POSITIONAL_OR_KEYWORD"
        out.append(
            {
                "name": arg.arg,
                "kind": kind,
                "default": None if default is None else ast.unparse(default),
                "required": default is None,
            }
        )
    if args.vararg:
        out.append({"name": args.vararg.arg, "kind": "VAR_POSITIONAL", "default": None, "required": False})
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        out.append(
            {
                "name": arg.arg,
                "kind": "KEYWORD_ONLY",
                "default": None if default is None else ast.unparse(default),
                "required": default is None,
            }
        )
    if args.kwarg:
        out.append({"name": args.kwarg.arg, "kind": "VAR_KEYWORD", "default": None, "required": False})
    return out


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef:
    # the last definition wins (overloads come first)
    return [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name][-1]


def record(wheel: Path) -> dict:
    with zipfile.ZipFile(wheel) as zf:

        def read(path: str) -> str:
            return zf.read(path).decode("utf-8")

        llm = ast.parse(read("vllm/entrypoints/llm.py"))
        sampling = ast.parse(read("vllm/sampling_params.py"))
        chat_message = read("vllm/renderers/chat_utils/chat_message.py")
        context = read("vllm/multimodal/processing/context.py")
        arg_utils = ast.parse(read("vllm/engine/arg_utils.py"))
        version = next(
            line.split(":", 1)[1].strip()
            for name in zf.namelist()
            if name.endswith(".dist-info/METADATA")
            for line in read(name).splitlines()
            if line.startswith("Version:")
        )
    cls = _class(llm, "LLM")
    fields = []
    for node in _class(sampling, "SamplingParams").body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and not node.target.id.startswith("_"):
            fields.append({"name": node.target.id, "default": None if node.value is None else ast.unparse(node.value)})
    engine_fields = [
        n.target.id
        for n in _class(arg_utils, "EngineArgs").body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and not n.target.id.startswith("_")
    ]
    table = chat_message[chat_message.index('] = {\n    "text"') :]
    part_types = re.findall(r'^    "([a-z_]+)": ', table[: table.index("\n}\n")], flags=re.MULTILINE)
    limit_message = re.search(
        r'msg = f"(At most \{limit\} \{modality\}\(s\) may be provided in one prompt\.)"', context
    ).group(1)
    return {
        "vllm_version": version,
        "source": wheel.name,
        "LLM.__init__": _params(_method(cls, "__init__")),
        "LLM.chat": _params(_method(cls, "chat")),
        "LLM.generate": _params(_method(cls, "generate")),
        "SamplingParams": fields,
        "EngineArgs": engine_fields,
        "chat_content_part_types": part_types,
        "mm_limit_error": limit_message,
    }


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        sys.exit("usage: record_vllm_api.py VLLM_WHEEL OUT_JSON")
    data = record(Path(argv[0]))
    Path(argv[1]).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(
        f"recorded vllm {data['vllm_version']}: {len(data['LLM.__init__'])} LLM() parameters, "
        f"{len(data['SamplingParams'])} SamplingParams fields"
    )


if __name__ == "__main__":
    main(sys.argv[1:])

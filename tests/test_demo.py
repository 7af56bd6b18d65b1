"""`commonlink demo` end to end at a small scale: render -> pairs -> release -> load_dataset -> baselines."""

import json

import pytest
from typer.testing import CliRunner

from commonlink.cli import app

pytestmark = pytest.mark.slow  # every test here runs whole client processes or pipelines


def test_rerun_with_other_options_names_a_fix_the_demo_has(tmp_path):
    """The synth runner's "add --overwrite" hint is wrong for `demo`, which has no such option."""
    from commonlink.synth.job import SynthJob
    from commonlink.synth.plan import PlanConfig
    from commonlink.synth.runner import synthesize

    out = tmp_path / "demo"
    synthesize(out / "catalog-main", SynthJob(scenes=0, plan=PlanConfig(3, 7, width=32, height=32)), progress=False)
    result = CliRunner().invoke(
        app, ["demo", "--out", str(out), "--seed", "1", "--resolution", "32x32", "--scale", "0.05", "--quiet"]
    )
    assert result.exit_code == 1
    assert "different options" in result.output and "seed" in result.output
    assert "--overwrite" not in result.output and "--out" in result.output


@pytest.mark.slow
def test_demo_runs_whole_flow(tmp_path):
    pytest.importorskip("pyrender")
    out = tmp_path / "demo"
    args = ["demo", "--out", str(out), "--scale", "0.15", "--resolution", "128x128", "--quiet"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    res_rows = {}
    for split in ("main", "challenge"):
        assert (out / f"catalog-{split}" / "catalog.jsonl").stat().st_size > 0
        assert (out / f"pairs-{split}.jsonl").stat().st_size > 0
        for model in ("random", "none"):
            res = json.loads((out / "eval" / f"{split}-{model}" / "results.json").read_text())
            assert res["dataset"]["rows_scored"] == res["dataset"]["rows_in_split"] > 0
            assert (out / "eval" / f"{split}-{model}" / "report.html").is_file()
            res_rows[split] = res["dataset"]["rows_scored"]
    assert (out / "release" / "README.md").is_file()
    assert list((out / "release" / "data").glob("main-*.parquet"))
    assert "| none | baseline | main |" in result.output
    assert "Where everything went" in result.output
    for split in ("main", "challenge"):  # one report per split, both baselines side by side, printed
        page = out / "eval" / f"report-{split}.html"
        html = page.read_text(encoding="utf-8")
        data = json.loads(html.split('id="report-data">', 1)[1].split("</script>", 1)[0])
        assert data["runs"] == ["random", "none"] and len(data["rows"]) == res_rows[split]
        assert all((page.parent / url).is_file() for row in data["rows"] for url in row["im"])
        assert page.resolve().as_uri() in result.output.replace("\n", "")
    # Rerun: scenes and predictions are reused, same table.
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    table = [line for line in result.output.splitlines() if line.startswith("| ")]
    assert table == [line for line in again.output.splitlines() if line.startswith("| ")]

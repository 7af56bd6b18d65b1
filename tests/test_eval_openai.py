"""The openai backend against a local HTTP server speaking the chat-completions protocol
(``tests.fixtures.openai_server``)."""

from __future__ import annotations

import base64
import io
import json

import pytest
from PIL import Image
from typer.testing import CliRunner

from commonlink.cli import app
from commonlink.errors import BackendError
from commonlink.eval.backends import GenerationRequest, GenerationSettings, load_backend
from commonlink.kinds.common_o.task import evaluate_common_o
from tests.fixtures.openai_server import IMAGES_NOT_SUPPORTED, LatencyServer
from tests.fixtures.tiny_models import common_o_rows, write_common_o_split

SECRET = "sk-test-0123456789-very-secret"


def chat_server(*, failures=(429, 503), answer="Answer: A", refuse_max_tokens=False) -> LatencyServer:
    """A server that wants the key ``SECRET`` and fails the first requests with ``failures`` (429 then 503 by
    default)."""
    return LatencyServer(
        latency_s=(0.02, 0.02),
        failures=failures,
        answer=answer,
        api_key=SECRET,
        refuse_max_tokens=refuse_max_tokens,
        retry_after_ms="5",
    )


@pytest.fixture()
def data_dir(tmp_path):
    return write_common_o_split(tmp_path / "data", common_o_rows(6, seed=4))


@pytest.mark.slow
def test_openai_backend_scores_retries_and_hides_the_key(data_dir, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("MY_KEY", SECRET)
    with chat_server() as server:
        backend = load_backend("openai", "served-vlm", base_url=server.url, api_key_env="MY_KEY", concurrency=3)
        results = evaluate_common_o(
            data_dir, "main", backend_instance=backend, out_dir=tmp_path / "out", n_boot=50, progress=False
        )
    assert server.statuses.count(429) == 1 and server.statuses.count(503) == 1 and backend.retries == 2
    assert results["dataset"]["rows_scored"] == 6 and results["metrics"]["overall"]["parse_failures"] == 0
    assert 1 < server.max_in_flight <= 3  # concurrent, but bounded
    body = server.bodies[0]
    assert body["model"] == "served-vlm" and body["temperature"] == 0.0
    parts = body["messages"][0]["content"]
    assert [p["type"] for p in parts] == ["image_url", "image_url", "text"]
    assert parts[2]["text"].startswith("Which objects are present in both images?")
    url = parts[0]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).size == (
        512,
        384,
    )  # 64x48 at the paper's 384-px shorter side
    written = "".join(p.read_text() for p in (tmp_path / "out").iterdir() if p.is_file())
    assert SECRET not in written and SECRET not in caplog.text
    assert results["backend_details"]["api_key"] == "from $MY_KEY"


def test_wrong_key_is_a_clear_error_without_the_key(monkeypatch):
    monkeypatch.setenv("MY_KEY", "sk-wrong-key-abcdef")
    with chat_server(failures=()) as server:
        backend = load_backend("openai", "m", base_url=server.url, api_key_env="MY_KEY")
        with pytest.raises(BackendError) as err:
            backend.generate([GenerationRequest("r", [Image.new("RGB", (8, 8))], "hi")], GenerationSettings())
    assert "401" in err.value.problem and "sk-wrong-key-abcdef" not in str(err.value)


def test_a_key_pasted_as_the_variable_name_is_refused_without_echoing_it(data_dir, tmp_path):
    """``--api-key-env sk-...`` (the key instead of the variable's name) must not end up in results.json or the
    error."""
    from commonlink.errors import InputError

    with pytest.raises(InputError) as err:
        load_backend("openai", "m", base_url="http://127.0.0.1:9/v1", api_key_env=SECRET)
    assert SECRET not in f"{err.value.problem} {err.value.fix}" and "environment variable" in err.value.problem
    result = CliRunner().invoke(
        app,
        [
            "eval",
            "commono",
            "--backend",
            "openai",
            "--model",
            "m",
            "--backend-arg",
            "base_url=http://127.0.0.1:9/v1",
            "--backend-arg",
            f"api_key_env={SECRET}",
            "--data",
            str(data_dir),
            "--out",
            str(tmp_path / "cli"),
            "--quiet",
        ],
    )
    assert result.exit_code == 1 and SECRET not in result.output and "api_key_env" in result.output
    assert not (tmp_path / "cli" / "results.json").exists()


def test_credentials_in_the_base_url_are_not_recorded():
    """A gateway URL with a password or a token in its query must not be copied into results.json or cache keys."""
    url = "http://user:pw-s3cret@127.0.0.1:9/v1?api-key=tok-s3cret"
    backend = load_backend("openai", "m", base_url=url)
    recorded = json.dumps([backend.info.fingerprint, backend.info.details])
    assert "s3cret" not in recorded and "127.0.0.1:9/v1" in recorded
    assert str(backend.client.base_url).startswith("http://user:pw-s3cret@127.0.0.1:9/v1")  # the real URL is still used


def test_server_down_after_retries_is_a_backend_error(monkeypatch):
    monkeypatch.setenv("MY_KEY", SECRET)
    with chat_server(failures=[503] * 10) as server:
        backend = load_backend("openai", "m", base_url=server.url, api_key_env="MY_KEY", max_retries=2)
        with pytest.raises(BackendError) as err:
            backend.generate([GenerationRequest("row-9", [], "hi")], GenerationSettings())
    assert (
        "row-9" in err.value.problem
        and "after 2 retries" in err.value.problem
        and server.statuses == [503] * 3
        and backend.retries == 3
    )


def test_cli_openai_backend(data_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("MY_KEY", SECRET)
    with chat_server(failures=(), answer="<think>both show it</think>\n**Answer:** A") as server:
        result = CliRunner().invoke(
            app,
            [
                "eval",
                "commono",
                "--backend",
                "openai",
                "--model",
                "served-vlm",
                "--backend-arg",
                f"base_url={server.url}",
                "--backend-arg",
                "api_key_env=MY_KEY",
                "--concurrency",
                "4",
                "--data",
                str(data_dir),
                "--out",
                str(tmp_path / "cli"),
                "--quiet",
                "--bootstrap",
                "50",
            ],
        )
    assert result.exit_code == 0, result.output
    assert "| served-vlm | openai | main | 6 |" in result.output and SECRET not in result.output
    saved = json.loads((tmp_path / "cli" / "results.json").read_text())
    assert saved["metrics"]["overall"]["parse_failures"] == 0


def test_switches_to_max_completion_tokens_when_the_server_asks(monkeypatch):
    monkeypatch.setenv("MY_KEY", SECRET)
    with chat_server(failures=(), refuse_max_tokens=True) as server:
        backend = load_backend("openai", "m", base_url=server.url, api_key_env="MY_KEY")
        out = backend.generate(
            [GenerationRequest("r", [], "hi"), GenerationRequest("s", [], "ho")], GenerationSettings(max_new_tokens=7)
        )
    assert out == ["Answer: A", "Answer: A"]
    assert all(b["max_completion_tokens"] == 7 and "max_tokens" not in b for b in server.bodies)


def test_concurrent_requests_stay_bounded_retry_failures_and_count_tokens_and_cost(data_dir, tmp_path, monkeypatch):
    """Latency and a 503 on every 5th request: all rows answered (the SDK retried), never more than --concurrency in
    flight, token counts and the cost from the given prices in results.json."""
    monkeypatch.setenv("MY_KEY", SECRET)
    with LatencyServer(latency_s=(0.02, 0.06), fail_every=5) as server:
        backend = load_backend(
            "openai",
            "served-vlm",
            base_url=server.url,
            api_key_env="MY_KEY",
            concurrency=4,
            price_input_per_mtok=2.0,
            price_output_per_mtok=8.0,
        )
        results = evaluate_common_o(
            data_dir, "main", backend_instance=backend, out_dir=tmp_path / "out", n_boot=20, progress=False
        )
        backend.close()
    assert results["dataset"]["rows_scored"] == 6 and results["skipped"] == 0
    assert 1 < server.max_in_flight <= 4
    usage = results["backend_details"]["usage"]
    assert backend.retries >= 1 and server.seen == 6 + backend.retries
    assert usage["requests"] == 6 and usage["completion_tokens"] == 12 and usage["prompt_tokens"] > 0
    assert usage["cost_usd"] == pytest.approx((usage["prompt_tokens"] * 2.0 + usage["completion_tokens"] * 8.0) / 1e6)


@pytest.mark.slow
def test_a_slow_request_holds_up_only_its_own_slot(monkeypatch):
    """The pool is not a batch barrier: with 2 slots, one slow request (1.5 s) and eight fast ones (10 ms), the other
    slot answers all eight fast ones while the slow one is still running (it finishes last)."""
    monkeypatch.setenv("MY_KEY", SECRET)
    with LatencyServer(latency_s=(0.01, 0.01), slow={"q0": 1.5}) as server:
        backend = load_backend("openai", "m", base_url=server.url, api_key_env="MY_KEY", concurrency=2)
        out = backend.generate([GenerationRequest(f"r{i}", [], f"q{i}") for i in range(9)], GenerationSettings())
        backend.close()
    assert out == ["Answer: A"] * 9 and server.max_in_flight == 2
    assert server.finished[-1] == "q0" and sorted(server.finished[:-1]) == [f"q{i}" for i in range(1, 9)]


def test_a_base_url_without_v1_gets_the_servers_404_and_the_fix(monkeypatch):
    """OpenAI (and vllm serve) answer an unknown path with 404 "Invalid URL"; the backend stops and names base_url."""
    monkeypatch.setenv("MY_KEY", SECRET)
    with chat_server(failures=()) as server:
        backend = load_backend("openai", "m", base_url=server.url.removesuffix("/v1"), api_key_env="MY_KEY")
        with pytest.raises(BackendError) as err:
            backend.generate([GenerationRequest("r", [], "hi")], GenerationSettings())
        backend.close()
    assert (
        "404" in err.value.problem
        and "Invalid URL (POST /chat/completions)" in err.value.problem
        and "/v1" in err.value.fix
    )
    assert server.statuses == [404] and server.bodies == []


def test_a_server_that_asks_for_a_long_wait_is_not_retried_and_the_error_says_so(monkeypatch):
    """The SDK does not retry when Retry-After exceeds its 2-minute limit: the error must say 0 retries, not
    max_retries."""
    monkeypatch.setenv("MY_KEY", SECRET)
    with LatencyServer(latency_s=(0.01, 0.01), failures=[503] * 5, api_key=SECRET, retry_after_ms="600000") as server:
        backend = load_backend("openai", "m", base_url=server.url, api_key_env="MY_KEY", max_retries=4)
        with pytest.raises(BackendError) as err:
            backend.generate([GenerationRequest("row-3", [], "hi")], GenerationSettings())
        backend.close()
    assert server.statuses == [503] and "row-3" in err.value.problem and "after 0 retries" in err.value.problem


def _cli_eval(server, data_dir, out, model, *extra):
    return CliRunner().invoke(
        app,
        [
            "eval",
            "commono",
            "--backend",
            "openai",
            "--model",
            model,
            "--backend-arg",
            f"base_url={server.url}",
            "--backend-arg",
            "api_key_env=MY_KEY",
            "--data",
            str(data_dir),
            "--out",
            str(out),
            "--quiet",
            "--bootstrap",
            "20",
            *extra,
        ],
    )


def test_reasoning_model_scores_every_row_under_the_apis_rules(data_dir, tmp_path, monkeypatch, caplog):
    """o-series / gpt-5 refuse max_tokens, a temperature other than 1 and top_p (400 naming the param): send
    max_completion_tokens and neither, from the model's name."""
    monkeypatch.setenv("MY_KEY", SECRET)
    with LatencyServer(latency_s=(0.0, 0.01), reasoning=True) as server:
        result = _cli_eval(server, data_dir, tmp_path / "o4", "o4-mini", "--temperature", "0.7")
    assert result.exit_code == 0, result.output
    saved = json.loads((tmp_path / "o4" / "results.json").read_text())
    assert saved["dataset"]["rows_scored"] == 6 and saved["skipped"] == 0
    assert 400 not in server.statuses and len(server.bodies) == 6
    assert all(
        b["max_completion_tokens"] == 1024 and not {"max_tokens", "temperature", "top_p"} & set(b)
        for b in server.bodies
    )
    assert "reasoning model" in saved["backend_details"]["request_rules"]
    # the record is what was sent: the temperature asked is recorded as not sent, the name does not claim T=0.7,
    # and the run said so once, before the first request
    assert saved["generation_not_sent"]["temperature"]["asked"] == 0.7
    assert saved["generation_not_sent"]["temperature"]["sent"] is None
    assert saved["run_name"] == "o4-mini temperature not sent" and "T=0.7" not in saved["run_name"]
    warned = [r.getMessage() for r in caplog.records if "is not sent" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith("--temperature 0.7 is not sent (reasoning model")
    sample = json.loads((tmp_path / "o4" / "lmms_eval" / "samples_common_o.jsonl").read_text().splitlines()[0])
    assert "temperature" not in sample["arguments"][0][1]


def test_a_refused_parameter_stops_the_run_naming_it_and_the_fix(data_dir, tmp_path, monkeypatch):
    """A reasoning model behind a name we cannot recognise (an Azure deployment): the API's refusal of temperature
    stops the run at once with the parameter and the fix, instead of skipping every row."""
    monkeypatch.setenv("MY_KEY", SECRET)
    with LatencyServer(latency_s=(0.0, 0.0), reasoning=True) as server:
        result = _cli_eval(server, data_dir, tmp_path / "dep", "my-deployment")
        assert result.exit_code != 0
        assert "'temperature' does not support 0.0 with this model" in result.output
        assert "parameter temperature" in result.output and "reasoning=true" in result.output
        # With the fix the same run scores every row.
        fixed = _cli_eval(server, data_dir, tmp_path / "dep", "my-deployment", "--backend-arg", "reasoning=true")
    assert fixed.exit_code == 0, fixed.output
    assert json.loads((tmp_path / "dep" / "results.json").read_text())["dataset"]["rows_scored"] == 6


def test_a_run_whose_every_request_was_refused_fails_with_the_apis_reason(data_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("MY_KEY", SECRET)
    with LatencyServer(latency_s=(0.0, 0.0), refuse_all=IMAGES_NOT_SUPPORTED) as server:
        result = _cli_eval(server, data_dir, tmp_path / "text-only", "gpt-3.5-turbo")
    assert result.exit_code != 0
    assert "No row was scored" in result.output and "image_url is only supported by certain models" in result.output
    saved = json.loads((tmp_path / "text-only" / "results.json").read_text())  # the reasons stay on disk
    assert saved["skipped"] == 6 and saved["metrics"]["overall"]["n"] == 0


def test_refusing_every_request_stops_before_the_whole_dataset_is_sent(monkeypatch):
    from commonlink.eval.backends.openai_backend import SYSTEMIC_REFUSALS

    monkeypatch.setenv("MY_KEY", SECRET)
    with LatencyServer(latency_s=(0.0, 0.0), refuse_all=IMAGES_NOT_SUPPORTED) as server:
        backend = load_backend("openai", "gpt-3.5-turbo", base_url=server.url, api_key_env="MY_KEY", concurrency=1)
        requests = [GenerationRequest(f"r{i}", [], "hi") for i in range(SYSTEMIC_REFUSALS + 20)]
        with pytest.raises(BackendError, match=f"refused the first {SYSTEMIC_REFUSALS} requests") as info:
            backend.generate(requests, GenerationSettings())
        backend.close()
    assert "image_url is only supported by certain models" in str(info.value)
    assert server.seen <= SYSTEMIC_REFUSALS + 1


def test_an_association_run_whose_every_request_was_refused_fails(tmp_path, monkeypatch):
    """eval association, like eval commono: when the API answered no request, the run exits non-zero instead of
    reporting chains that all ended at their first step."""
    from tests.fixtures.tiny_chains import write_tiny_chain_files

    chains = write_tiny_chain_files(tmp_path / "src")
    monkeypatch.setenv("MY_KEY", SECRET)
    with LatencyServer(latency_s=(0.0, 0.0), refuse_all=IMAGES_NOT_SUPPORTED) as server:
        result = CliRunner().invoke(
            app,
            [
                "eval",
                "association",
                "--data",
                str(chains),
                "--config",
                "single_step",
                "--backend",
                "openai",
                "--model",
                "gpt-3.5-turbo",
                "--backend-arg",
                f"base_url={server.url}",
                "--backend-arg",
                "api_key_env=MY_KEY",
                "--out",
                str(tmp_path / "run"),
                "--quiet",
                "--bootstrap",
                "10",
            ],
        )
    assert result.exit_code != 0 and "No request was answered" in result.output, result.output
    assert SECRET not in result.output

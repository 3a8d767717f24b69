"""`regress --connect` against a real Playwright browser server (`playwright launch-server`, started here with this
machine's Chromium and regress's own SwiftShader flags), `--shard`, and `regress-merge`: two shards driven through
the server, merged, give the report of one run of the whole cases file: every case in the file's order, each held
to its CPU reference (tests/test_regress_shards.py tests the merge's order and refusals without a browser)."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from builder.check.regress import merge
from builder.check.regress.cases import RegressOptions
from builder.check.regress.report import compare, metrics_json
from builder.check.regress.run import main
from builder.errors import RegressionError
from builder.pipeline import imaging
from builder.site.chrome import launch_args
from builder.site.server import create_app, serve_in_thread

SERVER_START_S = 180


@pytest.fixture(scope="module")
def browser_server(chromium_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`playwright launch-server --browser chromium --config server.json` (Playwright's own CLI, run by its node
    driver as `python -m playwright` runs it); yields the ws:// address it prints."""
    from playwright._impl._driver import compute_driver_executable, get_driver_env

    config = tmp_path_factory.mktemp("browser-server") / "server.json"
    config.write_text(
        json.dumps(
            {
                "executablePath": str(chromium_path),
                "headless": True,
                "args": launch_args(gpu=False),
                "host": "127.0.0.1",
                "port": 0,
            }
        )
    )
    node, cli = compute_driver_executable()
    process = subprocess.Popen(
        [node, cli, "launch-server", "--browser", "chromium", "--config", str(config)],
        env=get_driver_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(
        target=lambda: lines.append(process.stdout.readline() if process.stdout else ""), daemon=True
    )
    reader.start()
    reader.join(timeout=SERVER_START_S)
    try:
        assert lines and lines[0].startswith("ws://"), f"launch-server printed {lines!r} (exit {process.poll()})"
        yield lines[0].strip()
    finally:
        process.terminate()  # the server closes its browser on SIGTERM
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)


def cases_file(folder: Path) -> Path:
    path = folder / "cases.toml"
    path.write_text(
        "".join(
            f'[[cases]]\nname = "fox-{seed}"\nprompt = "a red fox in the snow"\nseed = {seed}\n' for seed in (1, 2, 3)
        )
    )
    return path


def report(folder: Path) -> dict[str, object]:
    return dict(json.loads((folder / "report.json").read_text()))


@pytest.mark.browser
@pytest.mark.slow
def test_two_shards_through_a_browser_server_merge_into_the_report_of_one_run(
    browser_server: str, tiny_models: dict[str, Path], dist_dir: Path, tmp_path: Path
) -> None:
    models = tiny_models["fp32"]
    common: dict[str, Any] = {
        "models_dir": models,
        "cases_file": cases_file(tmp_path),
        "size": "64x64",
        "steps": 2,
        "reference_from_cpu": True,
    }
    messages: list[str] = []
    # Shard 1 in the server's browser, the app served here.
    one = tmp_path / "shard-1"
    one_code = main(
        RegressOptions(**common, dist_dir=dist_dir, report_dir=one, shard="1/2", connect=browser_server),
        log=messages.append,
    )
    # Shard 2 in the server's browser, the app opened where it is deployed, ?model= naming the repository.
    two = tmp_path / "shard-2"
    with serve_in_thread(create_app(dist_dir, models_dir=models), log_level="critical") as port:
        deployed = f"http://127.0.0.1:{port}/?model=http://127.0.0.1:{port}/models/"
        two_code = main(
            RegressOptions(**common, report_dir=two, shard="2/2", connect=browser_server, app_url=deployed),
            log=messages.append,
        )
    assert any(f"opens the app at {deployed}" in message for message in messages)

    merged = tmp_path / "merged"
    merged_code = merge.merge(merged, [one, two], log=messages.append)
    assert merged_code == max(one_code, two_code) == 0

    # The merged report is the one a run of the whole file writes: every case in the file's order, each verdict and
    # metric what its own candidate and reference give, each case's folder with it.
    merged_data = report(merged)
    assert merged_data["verdict"] == "pass"
    cases = merged_data["cases"]
    assert isinstance(cases, list)
    assert [(c["case"], c["position"], c["shard"]) for c in cases] == [
        ("fox-1", 1, 1),
        ("fox-2", 2, 2),
        ("fox-3", 3, 1),
    ]
    for case in cases:
        name = case["case"]
        candidate = imaging.read_png(merged / name / "candidate.png")[0]
        reference = imaging.read_png(merged / name / "reference.png")[0]
        comparison = compare(candidate, reference, psnr_min=40.0)
        assert case["verdict"] == comparison.verdict.label == "pass"
        assert case["metrics"] == metrics_json(comparison.metrics)
        assert json.loads((merged / name / "report.json").read_text())["parameters"]["seed"] == int(name[-1])
    # The shards say which browser ran them: the server's, reached once, its secret path left out.
    browser = report(one)["browser"]
    assert isinstance(browser, dict) and "executable" not in browser and browser["launches"] == 1
    assert browser["remote"].startswith("ws://127.0.0.1:") and browser["remote"].endswith("/…")
    assert browser_server.rsplit("/", 1)[1] not in (one / "report.json").read_text()


def this_machines_address() -> str | None:
    """A non-loopback IPv4 address of this machine (no packet is sent), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))
            address = str(probe.getsockname()[0])
        except OSError:
            return None
    return None if address.startswith("127.") or address == "0.0.0.0" else address


@pytest.mark.browser
def test_an_app_the_remote_browser_reaches_over_plain_http_could_not_run(
    browser_server: str, tiny_models: dict[str, Path], dist_dir: Path, tmp_path: Path
) -> None:
    """http on an address other than localhost is no secure context: no WebGPU, no model store; said at once."""
    address = this_machines_address()
    if address is None:
        pytest.skip("this machine has no address but the loopback one")
    options = RegressOptions(
        models_dir=tiny_models["fp32"],
        prompt="a fox",
        size="64x64",
        reference_from_cpu=True,
        dist_dir=dist_dir,
        report_dir=tmp_path / "report",
        connect=browser_server,
        host=address,
    )
    with pytest.raises(RegressionError, match=rf"http://{address}:\d+ is not a secure context") as raised:
        main(options, log=lambda _m: None)
    assert "--advertise http://localhost:PORT" in str(raised.value)
    assert not (tmp_path / "report").exists()

"""Notebook 03 opened as a new user would (issue #20): JupyterLab on loopback, headless Chromium,
Run All, with the smoke profile; its upstream (01, 02) is the session's smoke run's, copied, or, when
no selected test asserts that run, built first by the kit's pipeline.

Asserted from the page: every cell ran without an error; the live curves were redrawn in place
(several images seen in the training cell's one output); the kit's progress bar is a working widget
(no "Error displaying widget"); the trajectory view rendered its coloured tool-response spans under
its legend; no "Unknown child process" or third-party bar in any output; the rollout explorer at the
notebook's end follows its widgets (step, prompt, colouring: issue #32). Screenshots are saved under
the run folder (``<reports>/smoke/b/screenshots/``, in the test's tmp folder). The server (and its kernels, sandbox workers)
and the browser are stopped even on failure.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import psutil
import pytest
from papermill.iorw import load_notebook_node
from papermill.parameterize import parameterize_notebook
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.select import Select

from kit import pipeline
from kit.config.paths import REPO_ROOT
from kit.plan import Layout

pytestmark = pytest.mark.browser

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
NOTEBOOK = "03_rl_stage1"
RUN_ALL_TIMEOUT_S = 240


def _files(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def upstream(request, smoke_run_wanted, tmp_path_factory):
    """A smoke run folder holding what notebook 03 reads: the data (01) and the cold-start policy (02).
    Where the session also asserts the whole smoke chain (tests/pipeline/conftest.py), they are that
    run's, copied (~95 s of the suite), so 03 writes its stage1 folder here and never into that run;
    selected alone (``-m browser``), 01 and 02 run here, not the whole chain. Yields ``(Layout, source)``:
    the copied run's folder and its files' sizes and times before 03 ran, or None."""
    lay = Layout.for_run("smoke", "b", tmp_path_factory.mktemp("reports"))
    source = None
    if smoke_run_wanted(request.session.items):
        src, _ = request.getfixturevalue("smoke_chain")
        state = pipeline.read_state(src)
        for nb in ("01_data_curation", "02_cold_start_sft"):  # a later notebook's failure is the chain tests' to report
            assert state.get(nb, {}).get("status") == "done", f"the session's smoke chain did not finish {nb}: {state.get(nb)}"
        for name in ("data", "sft"):
            shutil.copytree(src.dir(name), lay.dir(name), symlinks=True)
        source = src.root, _files(src.root)
    else:
        series = [r for r in pipeline.standard_series(lay) if r.name in ("01_data_curation", "02_cold_start_sft")]
        pipeline.run_series(series, lay, progress_bar=False, echo=lambda line: None)
    assert (Path(lay.dir("sft")) / "policy").is_dir()
    return lay, source


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(server: subprocess.Popen) -> None:
    """SIGTERM the server (it shuts its kernels down), then SIGKILL whatever of its tree is left."""
    try:
        tree = psutil.Process(server.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        tree = []
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(10)
    _, alive = psutil.wait_procs(tree, timeout=10)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=10)


@pytest.fixture
def lab(upstream, tmp_path):
    """JupyterLab on 127.0.0.1 (free port, random token, no browser, no network: no news, update
    checks or extension manager), serving a folder with notebook 03 parameterised for the smoke run."""
    served = tmp_path / "served"
    served.mkdir()
    nb = load_notebook_node(str(pipeline.NOTEBOOK_DIR / f"{NOTEBOOK}.ipynb"))
    params = next(r.parameters for r in pipeline.standard_series(upstream[0]) if r.name == NOTEBOOK)
    nbformat.write(parameterize_notebook(nb, params), served / f"{NOTEBOOK}.ipynb")
    cfg_dir = tmp_path / "jupyter_config"
    cfg_dir.mkdir()
    lab_cfg = {"LabApp": {"news_url": None, "extension_manager": "readonly", "expose_app_in_browser": True,
                          "check_for_updates_class": "jupyterlab.handlers.announcements.NeverCheckForUpdate"}}
    (cfg_dir / "jupyter_server_config.json").write_text(json.dumps(lab_cfg))
    notify = tmp_path / "settings" / "@jupyterlab" / "apputils-extension"
    notify.mkdir(parents=True)
    (notify / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false"}))  # no news prompt
    port, token = _free_port(), secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if k != "KIT_PROGRESS"}  # widgets, as a user sees them
    env.update(JUPYTER_CONFIG_DIR=str(cfg_dir), JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p))
    log = (tmp_path / "lab.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         "--port-retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={served}",
         *(["--allow-root"] if os.geteuid() == 0 else []),
         f"--LabApp.user_settings_dir={tmp_path / 'settings'}", f"--LabApp.workspaces_dir={tmp_path / 'ws'}"],
        cwd=served, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2).read()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"JupyterLab did not start: {(tmp_path / 'lab.log').read_text()[-2000:]}") from None
                time.sleep(0.5)
        yield f"{url}/lab/tree/{NOTEBOOK}.ipynb?token={token}", upstream, served / f"{NOTEBOOK}.ipynb"
    finally:
        _stop(server)
        log.close()


@pytest.fixture
def browser(tmp_path):
    if not (CHROMIUM and DRIVER):
        pytest.skip("chromium and chromedriver are not installed (`make setup` installs the Debian packages "
                    "chromium and chromium-driver)")
    os.environ.setdefault("SE_AVOID_STATS", "true")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,2200", f"--user-data-dir={tmp_path / 'chromium'}", "--no-first-run"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(options=opts, service=Service(executable_path=DRIVER))
    try:
        yield driver
    finally:
        driver.quit()


# JavaScript run in the page; `window.jupyterapp` is there with LabApp.expose_app_in_browser
PANEL = "const p = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
READY = PANEL + """
if (!p || !p.content || !p.sessionContext || !p.sessionContext.session || !p.sessionContext.session.kernel) return null;
return p.sessionContext.session.kernel.status;"""
WATCH = PANEL + """
const cell = p.content.widgets[arguments[0]].node;
window.__kitImages = new Set();
const seen = () => cell.querySelectorAll('.jp-OutputArea img').forEach(
    img => window.__kitImages.add(img.src.length + ':' + img.src.slice(-80)));
new MutationObserver(seen).observe(cell, {subtree: true, childList: true, attributes: true, attributeFilter: ['src']});
window.jupyterapp.commands.execute('notebook:run-all-cells');
return true;"""
STATE = PANEL + """
const cells = p.content.widgets.filter(c => c.model.type === 'code');
const errors = cells.flatMap(c => c.model.outputs.toJSON().filter(o => o.output_type === 'error')
                                                   .map(o => o.ename + ': ' + o.evalue));
return {status: p.sessionContext.session.kernel.status, counts: cells.map(c => c.model.executionCount), errors};"""
CELL = PANEL + """
const cell = p.content.widgets[arguments[0]];
cell.node.scrollIntoView();
const q = s => Array.from(cell.node.querySelectorAll(s));
const tool = q('.jp-OutputArea pre span[data-kind="tool"]');
return {images: q('.jp-OutputArea img').length, progress: q('.widget-hprogress').length,
        legend: q('.kit-traj-legend span[data-kind]').map(e => e.getAttribute('data-kind')),
        tool_spans: tool.length, tool_background: tool.length ? getComputedStyle(tool[0]).backgroundColor : '',
        tool_text: tool.length ? tool[0].textContent : '', text: cell.node.innerText};"""


# the rollout explorer's rendered views in its cell (kit.explore.widgets: the group's header and table,
# the trajectory's token spans, which carry the colouring in their titles)
EXPLORER = PANEL + """
const cell = p.content.widgets[arguments[0]];
const q = s => Array.from(cell.node.querySelectorAll(s));
const head = q('.kit-group-head');
const titled = q('.kit-x pre span[title]');
return {head: head.length ? head[0].innerText : '', rows: q('table.kit-group-table tr[data-traj]').length,
        colour: titled.length ? titled[0].getAttribute('title').split(' ')[0] : '',
        buttons: q('.jp-OutputArea button').map(b => b.innerText.trim())};"""
CONTROL = PANEL + """
const cell = p.content.widgets[arguments[0]];
const kind = arguments[1], label = arguments[2];
if (kind === 'button') {
  const b = Array.from(cell.node.querySelectorAll('.jp-OutputArea button')).find(b => b.innerText.trim() === label);
  b.scrollIntoView(); b.click(); return true;
}
const box = Array.from(cell.node.querySelectorAll('.widget-dropdown')).find(
    d => d.querySelector('label') && d.querySelector('label').innerText.trim() === label);
return box.querySelector('select');"""


def _explorer_changes(browser, index: int, action, want, shots: Path, name: str) -> dict:
    """Do ``action``, then wait until the explorer's views satisfy ``want``; screenshot; the views."""
    action()
    deadline = time.monotonic() + 30
    while not want(view := browser.execute_script(EXPLORER, index)):
        assert time.monotonic() < deadline, f"the explorer did not follow {name}: {view}"
        time.sleep(0.3)
    browser.save_screenshot(str(shots / f"{NOTEBOOK}_explorer_{name}.png"))
    return view


def _drive_the_explorer(browser, index: int, lay, shots: Path) -> None:
    """Issue #32: the explorer of the stage notebook 03 just trained, driven through its widgets: the
    step (◀), the prompt (its dropdown) and the colouring (toggle buttons); the DOM follows each."""
    assert (Path(lay.dir("stage1")) / "explorer.html").exists()  # the static export, beside it
    view = browser.execute_script(EXPLORER, index)
    # opens at the latest recorded step (smoke: 2 steps), first prompt, tokens coloured by entropy
    assert "step 2 · prompt 0" in view["head"] and view["rows"] == 16 and view["colour"] == "entropy", view
    assert {"◀", "▶", "entropy", "advantage"} <= set(view["buttons"]), view
    _explorer_changes(browser, index, lambda: browser.execute_script(CONTROL, index, "button", "◀"),
                      lambda v: "step 1 · prompt 0" in v["head"], shots, "step")
    select = Select(browser.execute_script(CONTROL, index, "select", "prompt"))
    _explorer_changes(browser, index, lambda: select.select_by_index(1),
                      lambda v: "step 1 · prompt 1" in v["head"] and v["rows"] == 16, shots, "prompt")
    _explorer_changes(browser, index, lambda: browser.execute_script(CONTROL, index, "button", "advantage"),
                      lambda v: v["colour"] == "advantage" and "prompt 1" in v["head"], shots, "colour")


def _cell_index(nb: nbformat.NotebookNode, needle: str) -> int:
    return next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and needle in c.source)


def test_notebook_03_runs_all_in_jupyterlab(lab, browser):
    url, (lay, source), path = lab
    served = nbformat.read(path, as_version=4)
    train, anatomy = _cell_index(served, "LiveCurves("), _cell_index(served, "roc_step_anatomy(")
    explorer = _cell_index(served, "explore(run_dir)")
    browser.get(url)
    deadline = time.monotonic() + 90
    while browser.execute_script(READY) != "idle":
        assert time.monotonic() < deadline, "the notebook's kernel did not become idle in JupyterLab"
        time.sleep(0.5)
    assert browser.execute_script(WATCH, train)
    deadline = time.monotonic() + RUN_ALL_TIMEOUT_S
    while True:
        state = browser.execute_script(STATE)
        if state["errors"] or (state["status"] == "idle" and all(c is not None for c in state["counts"])):
            break
        assert time.monotonic() < deadline, f"Run All did not finish in {RUN_ALL_TIMEOUT_S} s: {state}"
        time.sleep(1.0)
    shots = Path(lay.root) / "screenshots"
    shots.mkdir(exist_ok=True)
    try:
        assert not state["errors"], f"a cell failed in JupyterLab: {state['errors']}"
        curves = browser.execute_script(CELL, train)
        images_seen = browser.execute_script("return window.__kitImages.size;")
        assert curves["images"] == 1 and images_seen >= 2, \
            f"live curves: {images_seen} distinct images drawn, {curves['images']} shown (expected >= 2 redrawn into 1)"
        assert curves["progress"] >= 1 and "RL stage1" in curves["text"], "the stage's progress bar widget"
        view = browser.execute_script(CELL, anatomy)
        browser.save_screenshot(str(shots / f"{NOTEBOOK}_trajectory.png"))
        assert view["legend"] == ["model", "call", "tool", "answer"]
        assert view["tool_spans"] >= 1 and view["tool_background"] == "rgb(227, 236, 250)", view
        assert "<tool_response>" in view["tool_text"]
        _drive_the_explorer(browser, explorer, lay, shots)
        page = browser.find_element("tag name", "body").text
        for noise in ("Error displaying widget", "Unknown child process", "Writing model shards", "Loading weights"):
            assert noise not in page
        if source is not None:  # 03 wrote here only, and nothing it wrote leads back to the copied run
            assert _files(source[0]) == source[1], "notebook 03 changed the smoke run it was copied from"
            written = [p for p in (lay.root / "stage1").rglob("*.json*") if str(source[0]) in p.read_text()]
            assert not written, f"stage1 files name the copied run's folder {source[0]}: {written}"
    finally:
        browser.execute_script(CELL, train)
        browser.save_screenshot(str(shots / f"{NOTEBOOK}_curves.png"))

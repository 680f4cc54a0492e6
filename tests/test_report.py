"""`vidprep report` opened in headless Chromium: the run page shows the computed score, a question
page the visited timestamps and loaded thumbnails, and model text is shown as text, never run."""

import json
import re
import shutil
import subprocess
import sys

import pytest

from vidprep.pipeline.answer import answer
from vidprep.pipeline.report import ReportWriter
from vidprep.pipeline.scoring import report
from vidprep.store.store import Store
from tests.conftest import config_for

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(not CHROMIUM, reason="Debian chromium is not installed (see the README install)")
INJECTED = "<script>document.title='pwned'</script>a caption with markup"


def chromium(tmp_path, url: str, *action: str) -> str:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                           f"--user-data-dir={profile}", "--virtual-time-budget=5000", "--window-size=1200,1400",
                           *action, url], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.fixture(scope="module")
def reported(tmp_path_factory, precomputed, sample_dir):
    cfg, _, _ = precomputed
    root = tmp_path_factory.mktemp("report")
    shutil.copytree(cfg.store.uri, root / "db")
    run_cfg = config_for(root / "db", sample_dir, "method=traveler", "method.max_iterations=1", "method.questions=1",
                         "method.window=3", "answer.limit=2")
    summary = answer(run_cfg)
    store = Store(str(root / "db"))
    rows = store.scan("predictions", f"run_key = '{summary.run_key}'").to_pylist()
    # A caption that carries markup, as a model or a dataset may write one.
    caption = store.scan("segment_captions", f"video_id = '{rows[0]['video_id']}'").to_pylist()[0]
    store.upsert("segment_captions", [caption | {"caption": INJECTED}])
    index = ReportWriter(store, root / "site").write([summary.run_key])
    return root, index, rows


def test_run_page_shows_the_computed_score_and_the_cost_plot(tmp_path, reported):
    _, index, rows = reported
    dom = chromium(tmp_path, index.as_uri(), "--dump-dom")
    expected = report(rows)["tasks"]["mcq"]["score"]
    assert f"accuracy {expected:.3f}" in re.findall(r"<span class=\"score\">([^<]+)</span>", dom)
    assert "id=\"cost-plot\"" in dom and dom.count("<circle") >= 1
    # TraveLER over vision=stored is not its paper's run, and the scores say so.
    assert "traveler asks visual questions, but no vision model sees the frames" in dom
    chromium(tmp_path, index.as_uri(), f"--screenshot={tmp_path / 'run.png'}")
    assert (tmp_path / "run.png").stat().st_size > 10_000


def test_question_page_shows_visited_timestamps_thumbnails_and_steps(tmp_path, reported):
    root, _, rows = reported
    row = rows[0]
    page = root / "site" / "questions" / f"{row['run_key']}_{row['qid']}.html"
    dom = chromium(tmp_path, page.as_uri(), "--dump-dom")
    visited = re.findall(r"<span class=\"visited\">([\d.]+)s</span>", dom)
    assert visited and visited == [f"{t:.1f}" for t in row["visited"]]
    thumbs = re.findall(r"<img class=\"thumb\"[^>]*>", dom)
    loaded = int(re.search(r'data-images-loaded="(\d+)"', dom).group(1))
    assert thumbs and loaded == len(thumbs)
    assert dom.count("class=\"step\"") == len(json.loads(row["trace_json"]))
    chromium(tmp_path, page.as_uri(), f"--screenshot={tmp_path / 'question.png'}")
    assert (tmp_path / "question.png").stat().st_size > 10_000


def test_model_text_is_shown_as_text_never_run(tmp_path, reported):
    root, _, rows = reported
    for page in (root / "site" / "questions" / f"{rows[0]['run_key']}_{rows[0]['qid']}.html",
                 root / "site" / "videos" / f"{rows[0]['video_id']}.html"):
        dom = chromium(tmp_path, page.as_uri(), "--dump-dom")
        assert "&lt;script&gt;document.title='pwned'&lt;/script&gt;a caption with markup" in dom
        assert "<title>pwned</title>" not in dom and "<script>document.title" not in dom


def test_report_command_writes_the_folder(tmp_path, reported):
    root, _, rows = reported
    done = subprocess.run([sys.executable, "-m", "vidprep.jobs.cli", "report", "--run", rows[0]["run_key"], "--out",
                           str(tmp_path / "site"), f"store.uri={root / 'db'}"], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "site" / "index.html").exists() and list((tmp_path / "site" / "thumbs").glob("*.jpg"))

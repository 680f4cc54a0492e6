"""`vidprep report` opened in headless Chromium, checked as a person would: the comparison page shows
the numbers `vidprep evaluate` prints and draws score against cost with one colour per method; the
question table's filters hide what they should; a question page draws the true and predicted spans
at their times on its axis, the frames visited by step, and the trace; model text is shown as text,
never run."""

import json
import re
import shutil
import subprocess
import sys
from collections import Counter, defaultdict
from html import unescape

import pytest

from vidprep.pipeline.answer import answer
from vidprep.evaluation.report import LANE_COLOURS, ReportWriter, outcome
from vidprep.store.store import Store
from tests.conftest import config_for
from vidprep.jobs.bench.endpoint import ScriptedEndpoint, fitting_reply

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(not CHROMIUM, reason="Debian chromium is not installed (see the README install)")
INJECTED = "<script>document.title='pwned'</script>a caption with markup"


def chromium(tmp_path, url: str, *action: str) -> str:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                           f"--user-data-dir={profile}", "--virtual-time-budget=10000", "--window-size=1200,1400",
                           *action, url], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.fixture(scope="module")
def reported(tmp_path_factory, precomputed, sample_dir):
    cfg, _, _ = precomputed
    root = tmp_path_factory.mktemp("report")
    shutil.copytree(cfg.store.uri, root / "db")
    # Three methods on overlapping questions: random answers all 7 (spans included), traveler the first 2
    # from an endpoint whose replies fit each request (what the report draws of a trace does not depend on
    # the model), and direct all 7 from an endpoint whose every reply is a span after the video's end:
    # invalid, for a localisation question because the span starts after the end, for the others because
    # it is no answer. The summary stage is left out for both: it is keyed by the local LLM's settings.
    fitting, late = ScriptedEndpoint(reply=fitting_reply), ScriptedEndpoint(default=json.dumps({"start": 34.0, "end": 40.0,
                                                                                      "confidence": 3}))
    endpoint = ["~stages.summary", "llm=openai", "llm.client.model=scripted", "llm.client.cache=false",
                "llm.client.max_retries=0"]
    try:
        keys = [answer(config_for(root / "db", sample_dir, *overrides)).run_key for overrides in (
            ["method=random"],
            ["method=traveler", "method.max_iterations=1", "method.questions=1", "method.window=2", "answer.limit=2",
             *endpoint, f"llm.client.base_url={fitting.base_url}"],
            ["method=direct", *endpoint, f"llm.client.base_url={late.base_url}"])]
    finally:
        fitting.close()
        late.close()
    store = Store(str(root / "db"))
    # Only these runs: the copied store may hold other tests' runs.
    rows = store.predictions(keys)
    # A caption that carries markup, as a model or a dataset may write one.
    caption = store.scan("segment_captions", f"video_id = '{rows[0]['video_id']}'").to_pylist()[0]
    store.upsert("segment_captions", [caption | {"caption": INJECTED}])
    index = ReportWriter(store, root / "site").write(keys)
    return root, index, rows


def question_page(root, row):
    return root / "site" / "questions" / f"{row['run_key']}_{row['qid']}.html"


def test_comparison_page_shows_evaluates_numbers_and_a_chart_with_one_colour_per_method(tmp_path, reported):
    root, index, rows = reported
    runs = [arg for key in sorted({r["run_key"] for r in rows}) for arg in ("--run", key)]
    done = subprocess.run([sys.executable, "-m", "vidprep.jobs.cli", "evaluate", *runs, f"store.uri={root / 'db'}"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    # evaluate's per-run lines: "  mcq: scored 3 of 3; 0 invalid (scored wrong); accuracy 0.333 (95% CI 0.000-1.000)..."
    printed = Counter(re.findall(
        r"  \w+: scored \d+ of \d+.*?; ((?:accuracy|mIoU|token F1) [\d.]+(?: \(95% CI [\d.-]+\))?)", done.stdout))
    dom = chromium(tmp_path, index.as_uri(), "--dump-dom")
    shown = Counter(unescape(s) for s in re.findall(r'<span class="score">([^<]+)</span>', dom))
    assert shown and shown == printed
    # Seven questions for direct and random, two for traveler: compared on the two they share, as evaluate says.
    assert "compared on the 2 every run answered" in done.stdout
    # Each pair of runs per task: its paired difference, as evaluate prints it and the page shows it.
    pairs = re.findall(r"^  (\w+) \([\w-]+\) - (\w+) \([\w-]+\) (\w+): ([+-][\d.]+)", done.stdout, re.M)
    shown_pairs = re.findall(r'<td class="difference">([+-][\d.]+)', dom)
    assert pairs and sorted(p[3] for p in pairs) == sorted(shown_pairs)
    assert {(a, b) for a, b, *_ in pairs} <= {("direct", "random"), ("direct", "traveler"), ("random", "traveler")}
    assert re.search(r"answered different questions\s*\(direct 7, random 7, traveler 2\);\s*they are compared on the 2",
                     dom)
    # The chart: drawn, with its axes' titles and values, one trace and one colour per method.
    assert 'data-charts-drawn="1"' in dom
    assert "tokens per question" in dom and "score (accuracy, mIoU or token F1)" in dom
    assert len(re.findall(r'<g class="xtick">', dom)) >= 2 and len(re.findall(r'<g class="ytick">', dom)) >= 2
    traces = dom.split('<g class="trace scatter')[1:]
    colours = {re.search(r'<path class="point[^>]*fill: (rgb\([^)]*\))', trace).group(1) for trace in traces}
    assert len(traces) == 3 and len(colours) == 3
    # TraveLER over vision=stored is not its paper's run, and the scores say so.
    assert "traveler asks visual questions, but no vision model sees the frames" in dom
    chromium(tmp_path, index.as_uri(), f"--screenshot={tmp_path / 'run.png'}")
    assert (tmp_path / "run.png").stat().st_size > 10_000


@pytest.mark.parametrize("query", ["method=random&outcome=right", "outcome=invalid", "disagree=1", "type=when"])
def test_question_filters_hide_every_row_that_does_not_match(tmp_path, reported, query):
    root, _, rows = reported
    dom = chromium(tmp_path, (root / "site" / "questions.html").as_uri() + "?" + query, "--dump-dom")
    table = re.findall(r'<tr class="question"([^>]*)>', dom)
    assert len(table) == len(rows)
    wanted = dict(part.split("=") for part in query.split("&"))
    attributes = [dict(re.findall(r'data-(\w+)="([^"]*)"', row)) | {"hidden": " hidden" in row} for row in table]
    matching = [a for a in attributes if all(a[name] == value for name, value in wanted.items())]
    assert all(not a["hidden"] for a in matching) and all(a["hidden"] for a in attributes if a not in matching)
    assert matching and f"{len(matching)} of {len(rows)} shown" in dom
    if query.startswith("method=random"):
        questions = [json.loads(r["question_json"]) for r in rows if r["method"] == "random"]
        right = [r for r, q in zip([r for r in rows if r["method"] == "random"], questions) if outcome(r, q) == "right"]
        assert len(matching) == len(right)


def _axis_and_bars(dom: str) -> tuple:
    """The x axis's seconds per pixel (from its tick labels) and each bar's [start, end] in pixels, by colour."""
    ticks = [(float(value), float(x)) for value, x in re.findall(
        r'<g class="xtick"><text[^>]*data-unformatted="([\d.]+)"[^>]*transform="translate\(([\d.]+),', dom)]
    (v0, x0), (v1, x1) = ticks[0], ticks[-1]
    bars = defaultdict(list)
    for left, right, colour in re.findall(r'<path d="M([\d.]+),[\d.]+V[\d.]+H([\d.]+)V[^"]*"[^>]*fill: (rgb\([^)]*\))',
                                          dom):
        bars[colour].append((float(left), float(right)))
    return (v1 - v0) / (x1 - x0), bars


def rgb(colour: str) -> str:
    return "rgb({}, {}, {})".format(*(int(colour[i:i + 2], 16) for i in (1, 3, 5)))


def test_question_page_draws_true_and_predicted_spans_at_their_times(tmp_path, reported):
    root, _, rows = reported
    row = next(r for r in rows if r["method"] == "random" and r["task"] == "rtl")
    truth, predicted = json.loads(row["question_json"])["answer"], json.loads(row["prediction_json"])
    dom = chromium(tmp_path, question_page(root, row).as_uri(), "--dump-dom")
    assert 'data-charts-drawn="1"' in dom and "time (s)" in dom
    per_pixel, bars = _axis_and_bars(dom)
    # Bars are drawn from the plot area's left edge, which is time 0.
    for lane, span in (("true span", truth), ("predicted span", predicted)):
        (left, right), = bars[rgb(LANE_COLOURS[lane])]
        assert left * per_pixel == pytest.approx(span[0], abs=0.05) and right * per_pixel == pytest.approx(
            span[1], abs=0.05), (lane, span)


def test_question_page_shows_visited_frames_by_step_and_the_trace(tmp_path, reported):
    root, _, rows = reported
    row = next(r for r in rows if r["method"] == "traveler")
    dom = chromium(tmp_path, question_page(root, row).as_uri(), "--dump-dom")
    visited = re.findall(r'<span class="visited">([\d.]+)s</span>', dom)
    assert visited and visited == [f"{t:.1f}" for t in row["visited"]]
    thumbs = re.findall(r'<img class="thumb"[^>]*>', dom)
    loaded = int(re.search(r'data-images-loaded="(\d+)"', dom).group(1))
    assert thumbs and loaded == len(thumbs)
    trace = json.loads(row["trace_json"])
    assert dom.count('class="step"') == len(trace)
    by_step = [s for s in trace if s.get("visited")]
    assert dom.count('class="step-frames"') == len(by_step)
    # Each visit is a mark on the timeline labelled with its step.
    assert sorted(re.findall(r'<g class="textpoint"[^>]*><text[^>]*>(\d+)</text>', dom)) == sorted(
        str(s["step"]) for s in by_step for _ in s["visited"])


def test_model_text_is_shown_as_text_never_run(tmp_path, reported):
    root, _, rows = reported
    for page in (question_page(root, rows[0]), root / "site" / "videos" / f"{rows[0]['video_id']}.html"):
        dom = chromium(tmp_path, page.as_uri(), "--dump-dom")
        assert "<title>pwned</title>" not in dom and "<script>document.title" not in dom
    video = chromium(tmp_path, (root / "site" / "videos" / f"{rows[0]['video_id']}.html").as_uri(), "--dump-dom")
    assert "&lt;script&gt;document.title='pwned'&lt;/script&gt;a caption with markup" in video


def test_report_command_writes_the_folder_and_each_runs_settings_beyond_its_defaults(tmp_path, reported):
    root, _, rows = reported
    runs = [arg for key in sorted({r["run_key"] for r in rows}) for arg in ("--run", key)]
    done = subprocess.run([sys.executable, "-m", "vidprep.jobs.cli", "report", *runs, "--out", str(tmp_path / "site"),
                           f"store.uri={root / 'db'}"], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "site" / "index.html").exists() and (tmp_path / "site" / "plotly.min.js").exists()
    assert list((tmp_path / "site" / "thumbs").glob("*.jpg"))
    settings = re.findall(r'<code class="settings">([^<]*)</code>', (tmp_path / "site" / "index.html").read_text())
    traveler = unescape(next(s for s in settings if s.startswith("method=traveler")))
    assert {"method.max_iterations=1", "method.questions=1", "method.window=2"} <= set(traveler.split())
    random = unescape(next(s for s in settings if s.startswith("method=random"))).split()
    assert not [t for t in random if t.startswith("method.")], random


def test_a_span_after_the_video_is_marked_invalid_and_not_drawn(tmp_path, reported):
    root, _, rows = reported
    row = next(r for r in rows if r["method"] == "direct" and r["task"] == "rtl")
    assert not row["valid"] and "span [34.0, 40.0] is not a range inside the video" in row["error"]
    dom = chromium(tmp_path, question_page(root, row).as_uri(), "--dump-dom")
    assert '<span class="outcome invalid">invalid</span>' in dom and "is not a range inside the video" in dom
    _, bars = _axis_and_bars(dom)
    assert len(bars[rgb(LANE_COLOURS["true span"])]) == 1 and rgb(LANE_COLOURS["predicted span"]) not in bars


def test_the_runs_questions_without_a_valid_answer_are_named_on_the_main_page(reported):
    from vidprep.evaluation.scoring import problem_lines

    _, index, rows = reported
    page = unescape(index.read_text())
    direct = [r for r in rows if r["method"] == "direct"]
    # Every answer of direct is a span after the video's end: all 7 named, each with its kind and reason.
    named = problem_lines(direct)
    assert len(named) == 7 and all(": invalid: " in line for line in named)
    for line in named:
        assert f"<li>{line}</li>" in page

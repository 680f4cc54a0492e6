"""A static HTML report of answer runs: one folder that opens from disk, no server, no network.

index.html (and page-N.html): scores per method and question type, costs, accuracy against cost,
and the questions, paginated. questions/Q.html: the question, the answer, a timeline of the video
(segment captions, transcript lines, every timestamp the method visited), thumbnails of the frames
it used and every step of its trace. videos/V.html: a video's precomputed artifacts. Every text
from a model or a dataset goes through `html.escape`.
"""

import html
import json
import re
from collections import defaultdict
from pathlib import Path

from vidprep.pipeline.scoring import METRIC, format_usd, report, score
from vidprep.store.artifacts import ARTIFACTS
from vidprep.store.store import ArtifactMissing, Store

PAGE_SIZE = 100
# The artifacts a question's timeline draws: those shown whose rows span time.
def _timeline_artifacts() -> list:
    return [a for a in ARTIFACTS.values() if a.title and {"start", "end"} <= set(a.columns)]
# The only script in a report (ours, no model text): how many thumbnails actually loaded, for a look
# at the DOM (the tests read it through headless Chromium).
COUNT_LOADED = ("<script>window.addEventListener('load', () => { document.body.dataset.imagesLoaded = "
                "[...document.images].filter(i => i.complete && i.naturalWidth > 0).length; });</script>")
STYLE = """
.warning { color: #b45309; font-size: 0.85em; }
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: 1em 0; } td, th { border: 1px solid #ccc; padding: 3px 8px; }
th { background: #f3f3f3; } .bad { color: #b00; } .ok { color: #070; } pre { white-space: pre-wrap; }
.timeline { position: relative; height: 74px; background: #f6f6f6; border: 1px solid #ccc; margin: 1em 0; }
.segment_captions { position: absolute; top: 0; height: 24px; background: #cfe3ff; border-right: 1px solid #fff;
           overflow: hidden; font-size: 11px; }
.transcripts { position: absolute; top: 26px; height: 20px; background: #ffe2b8; font-size: 11px; overflow: hidden; }
.visit { position: absolute; top: 48px; width: 2px; height: 24px; background: #d22; }
.thumbs img, .strip img { height: 90px; margin: 2px; } details { margin: .4em 0; }
summary { cursor: pointer; }
"""


def esc(value) -> str:
    return html.escape(str(value), quote=True)


def _page(title: str, body: str, depth: int = 0) -> str:
    up = "../" * depth
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)}</title>"
            f"<link rel='stylesheet' href='{up}style.css'></head><body>"
            f"<p><a href='{up}index.html'>runs</a></p><h1>{esc(title)}</h1>{body}{COUNT_LOADED}</body></html>")


def _name(text: str) -> str:
    """A file name for an id (question ids come from datasets)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)


def _table(header: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _cost_plot(points: list[tuple[str, float, float]]) -> str:
    """Main score (y) against tokens per question (x), one labelled point per method, as inline SVG."""
    if not points:
        return ""
    width, height, pad, labels = 640, 260, 40, 130
    most = max(x for _, x, _ in points) or 1.0
    marks = []
    for label, x, y in points:
        cx, cy = pad + x / most * (width - 2 * pad - labels), height - pad - y * (height - 2 * pad)
        marks.append(f"<circle cx='{cx:.1f}' cy='{cy:.1f}' r='5' fill='#36c'/>"
                     f"<text x='{cx + 7:.1f}' y='{cy - 7:.1f}' font-size='12'>{esc(label)}</text>")
    axes = (f"<line x1='{pad}' y1='{height - pad}' x2='{width - pad}' y2='{height - pad}' stroke='#888'/>"
            f"<line x1='{pad}' y1='{pad}' x2='{pad}' y2='{height - pad}' stroke='#888'/>"
            f"<text x='{width / 2}' y='{height - 8}' font-size='12' text-anchor='middle'>tokens per question "
            f"(max {most:.0f})</text><text x='12' y='{height / 2}' font-size='12' "
            f"transform='rotate(-90 12 {height / 2})' text-anchor='middle'>score (0-1)</text>")
    return f"<svg id='cost-plot' width='{width}' height='{height}'>{axes}{''.join(marks)}</svg>"


class ReportWriter:
    def __init__(self, store: Store, out: Path, prices: dict | None = None):
        # USD per 1M input / output tokens per model (config `prices`): money per question.
        self.store, self.out, self.prices = store, Path(out), prices
        self._thumbs: set[str] = set()
        self._recorded: dict[str, dict] | None = None

    def _run(self, run_key: str) -> dict:
        """What was recorded with the answer run (its newest record; empty when none was)."""
        if self._recorded is None:  # read once, not per question
            self._recorded = self.store.answer_runs()
        return self._recorded.get(run_key, {})

    def _keys(self, run_key: str, video_id: str) -> dict[str, str]:
        """The precompute keys the run answered from (recorded with the run; else the newest done)."""
        if "keys" in self._run(run_key):
            return self._run(run_key)["keys"]
        newest = {}
        for done in sorted(self.store.done_stages(video_id), key=lambda d: d["finished_at"]):
            newest[done["stage"]] = done["stage_key"]
        return newest

    def _thumb(self, video_id: str, frames_key: str, t: float, depth: int) -> str:
        try:
            frame = self.store.frame_nearest(video_id, frames_key, t)
        except (ArtifactMissing, IndexError):
            return ""
        if not frame.jpeg:
            return ""
        name = f"thumbs/{video_id}_{frame.frame_index}.jpg"
        if name not in self._thumbs:
            (self.out / name).write_bytes(frame.jpeg)
            self._thumbs.add(name)
        return (f"<img class='thumb' src='{'../' * depth}{name}' data-t='{frame.timestamp:.2f}' "
                f"title='t={frame.timestamp:.1f}s' alt='frame at {frame.timestamp:.1f}s'>")

    def _timeline(self, video_id: str, keys: dict, duration: float, visited: list[float]) -> str:
        span = max(duration, 1e-6)

        def box(css: str, start: float, end: float, text: str) -> str:
            left, width = 100 * start / span, max(0.4, 100 * (end - start) / span)
            return (f"<div class='{css}' style='left:{left:.2f}%;width:{width:.2f}%' "
                    f"title='{esc(f'{start:.1f}-{end:.1f}s: {text}')}'>{esc(text)}</div>")

        parts = []
        # Every shown artifact whose rows span time: blue segment captions, orange speech.
        for artifact in _timeline_artifacts():
            try:
                parts += [box(artifact.table, row.start, row.end, row.line())
                          for row in self.store.read(artifact, video_id, keys[artifact.stage])]
            except (ArtifactMissing, KeyError):
                pass
        parts += [f"<div class='visit' style='left:{100 * t / span:.2f}%' data-t='{t:.2f}' "
                  f"title='visited {t:.1f}s'></div>" for t in visited]
        stamps = ", ".join(f"<span class='visited'>{t:.1f}s</span>" for t in visited) or "none"
        return (f"<div class='timeline'>{''.join(parts)}</div><p>Visited timestamps (in order): {stamps}</p>"
                "<p><small>blue: segment captions, orange: speech, red: visited</small></p>")

    def _steps(self, trace: list[dict]) -> str:
        items = []
        for step in trace:
            kind = step.get("kind", "step")
            headline = step.get("tool") or kind
            extra = "".join(f" · {k} {esc(step[k])}" for k in ("confidence", "verdict", "seconds") if k in step)
            body = json.dumps({k: v for k, v in step.items() if k not in ("step", "kind")}, indent=1,
                              ensure_ascii=False, default=str)
            items.append(f"<details class='step'><summary>#{esc(step.get('step', ''))} {esc(headline)}{extra}"
                         f"</summary><pre>{esc(body)}</pre></details>")
        return "".join(items) or "<p>no steps recorded</p>"

    def question_page(self, row: dict) -> str:
        question = json.loads(row["question_json"])
        video = self.store.video(row["video_id"])
        keys = self._keys(row["run_key"], row["video_id"])
        predicted = json.loads(row["prediction_json"])
        choices = "".join(f"<li value='{i}'>{esc(c)}</li>" for i, c in enumerate(question["choices"]))
        verdict = ("<span class='bad'>invalid</span>" if not row["valid"]
                   else f"score {score(row):.2f}" if score(row) is not None else "no ground truth")
        thumbs = "".join(self._thumb(row["video_id"], keys.get("frames", ""), t, 1)
                         for t in sorted(set(row["visited"])))
        body = (f"<p>method <b>{esc(row['method'])}</b> · run {esc(row['run_key'])} · "
                f"<a href='../videos/{_name(row['video_id'])}.html'>video {esc(video['name'] or row['video_id'])}</a>"
                f" · type {esc(row['qtype'])}</p><h2 class='question'>{esc(question['question'])}</h2>"
                f"<ol start='0'>{choices}</ol><p>ground truth: <b class='truth'>{esc(question['answer'])}</b> · "
                f"prediction: <b class='prediction'>{esc(predicted)}</b> · {verdict}</p>"
                + (f"<p class='bad'>{esc(row['error'])}</p>" if row["error"] else "")
                + f"<p>{row['llm_calls']} LLM calls ({row['cache_hits']} cached), "
                  f"{row['prompt_tokens'] + row['completion_tokens']} tokens, {row['seconds']:.1f} s</p>"
                + self._timeline(row["video_id"], keys, video["duration"], row["visited"])
                + f"<h3>Frames used</h3><div class='thumbs'>{thumbs or 'none stored'}</div>"
                + f"<h3>Trace</h3>{self._steps(json.loads(row['trace_json']))}")
        return _page(f"{row['qid']} ({row['method']})", body, depth=1)

    def video_page(self, video_id: str, keys: dict) -> str:
        video = self.store.video(video_id)
        sections = [f"<p>{esc(video['source_path'])} · {video['duration']:.1f} s · {esc(video['codec'])}</p>"]
        try:
            frames = self.store.evenly_spaced_frames(video_id, keys["frames"], 24)
            sections.append("<h3>Frames</h3><div class='strip'>"
                            + "".join(self._thumb(video_id, keys["frames"], f.timestamp, 1) for f in frames) + "</div>")
        except (ArtifactMissing, KeyError):
            pass
        for artifact in ARTIFACTS.values():
            if not artifact.title:
                continue
            try:
                rows = self.store.read(artifact, video_id, keys[artifact.stage])
            except (ArtifactMissing, KeyError):
                continue
            sections.append(f"<h3>{artifact.title.capitalize()}</h3>" + "".join(f"<p>{esc(r.line())}</p>" for r in rows))
        done = sorted(self.store.done_stages(video_id), key=lambda d: d["stage"])
        sections.append("<h3>Stage keys in the store</h3>" + _table(
            ["stage", "key", "rows", "detail"],
            [[esc(d["stage"]), esc(d["stage_key"]), d["rows"], esc(d["detail"])] for d in done]))
        return _page(f"video {video['name'] or video_id}", "".join(sections), depth=1)

    def write(self, run_keys: list[str] | None = None) -> Path:
        rows = self.store.predictions(run_keys or ())
        if not rows:
            raise ArtifactMissing(f"no predictions{' for ' + ', '.join(run_keys) if run_keys else ''} in "
                                  f"{self.store.uri}; run `vidprep answer` first")
        for folder in ("questions", "videos", "thumbs"):
            (self.out / folder).mkdir(parents=True, exist_ok=True)
        (self.out / "style.css").write_text(STYLE)
        by_run = defaultdict(list)
        for row in sorted(rows, key=lambda r: (r["method"], r["run_key"], r["qid"])):
            by_run[(row["method"], row["run_key"])].append(row)

        summary_rows, points, videos = [], [], {}
        for (method, key), items in by_run.items():
            result = report(items, self.prices, self._run(key).get("dataset"))
            for task, entry in result["tasks"].items():
                value = "n/a" if entry["score"] is None else f"{entry['score']:.3f}"
                types = ", ".join(f"{esc(t or '-')} {v:.3f}" for t, v in entry["per_type"].items())
                # A run unlike its paper's (e.g. visual questions without a vision model) says so where it is scored.
                warned = "".join(f"<br><span class='warning' title='{esc(w)}'>&#9888; {esc(w.split(':')[0])}</span>"
                                 for w in self._run(key).get("warnings", []))
                summary_rows.append([esc(method) + warned, esc(key), esc(task), entry["questions"], entry["invalid"],
                                     f"<span class='score'>{METRIC[task]} {value}</span>", types,
                                     f"{result['costs']['llm_calls_per_question']:.1f}",
                                     f"{result['costs']['tokens_per_question']:.0f}",
                                     f"{result['costs']['frames_viewed_per_question']:.1f}",
                                     f"{result['costs']['seconds_per_question']:.1f}",
                                     esc(format_usd(result["costs"]).removeprefix("USD "))])
                if entry["score"] is not None:
                    points.append((f"{method} ({task})", result["costs"]["tokens_per_question"], entry["score"]))
            for row in items:
                (self.out / "questions" / f"{_name(key)}_{_name(row['qid'])}.html").write_text(self.question_page(row))
                videos.setdefault(row["video_id"], self._keys(key, row["video_id"]))
        for video_id, keys in videos.items():
            (self.out / "videos" / f"{_name(video_id)}.html").write_text(self.video_page(video_id, keys))

        header = (_table(["method", "run", "task", "questions", "invalid", "score", "per type", "LLM calls / q",
                          "tokens / q", "frames viewed / q", "s / q", "USD / q"], summary_rows)
                  + "<h2>Score against cost</h2>" + _cost_plot(points))
        listing = [row for items in by_run.values() for row in items]
        pages = [listing[i:i + PAGE_SIZE] for i in range(0, len(listing), PAGE_SIZE)]
        for number, page in enumerate(pages, 1):
            links = " ".join(f"<a href='{self._page_file(n)}'>{n}</a>" if n != number else f"<b>{n}</b>"
                             for n in range(1, len(pages) + 1))
            table = _table(["method", "question", "type", "prediction", "truth", "valid", "LLM calls"], [[
                esc(r["method"]),
                f"<a href='questions/{_name(r['run_key'])}_{_name(r['qid'])}.html'>"
                f"{esc(json.loads(r['question_json'])['question'])}</a>", esc(r["qtype"]),
                esc(json.loads(r["prediction_json"])), esc(json.loads(r["question_json"])["answer"]),
                "<span class='ok'>yes</span>" if r["valid"] else "<span class='bad'>no</span>", r["llm_calls"]]
                for r in page])
            body = header + f"<h2>Questions ({len(listing)}, page {number} of {len(pages)})</h2><p>{links}</p>" + table
            (self.out / self._page_file(number)).write_text(_page("vidprep answer runs", body))
        return self.out / "index.html"

    @staticmethod
    def _page_file(number: int) -> str:
        return "index.html" if number == 1 else f"page-{number}.html"

"""A static HTML report of answer runs: one folder that opens from disk, no server, no network.

index.html compares the runs: scores with their 95% intervals on the questions every run answered,
per type, costs per question, the settings that differ from each method's defaults, and score
against cost as a chart. questions.html lists every answer with its outcome, filtered by method,
type, outcome and where methods disagree (the filters also read the page's query string:
questions.html?method=traveler&outcome=wrong). questions/Q.html: the question, every run's answer,
a timeline of the video on a time axis (segment captions, speech, the true and predicted spans, the
frames visited at each step), the frames used by step and the trace. videos/V.html: a video's
precomputed artifacts.

Pages come from Jinja2 templates with autoescaping, so no model or dataset text is ever markup;
charts are Plotly figures (its JavaScript ships in the plotly wheel and is copied into the folder).
"""

import json
import re
import shutil
from collections import defaultdict
from pathlib import Path

import jinja2
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from vidprep.evaluation.benchmarks import run_benchmark
from vidprep.evaluation.scoring import (METRIC, NAMED_PROBLEMS, comparison, coverage, format_categories, format_pair,
                                        format_score, format_usd, incomplete_note, not_an_answer, problem_lines,
                                        report, score)
from vidprep.evaluation.tracking import beyond_defaults
from vidprep.store.artifacts import ARTIFACTS
from vidprep.store.store import Store
from vidprep.conf.checks import ArtifactMissing

TEMPLATES = Path(__file__).resolve().parent / "report_templates"
# A span or an open answer counts as right from this score (IoU / token F1) on, as P@0.5 counts it.
RIGHT_FROM = 0.5
# The timeline's lanes, top to bottom, and their colours; visits are coloured by step.
LANE_COLOURS = {"true span": "#2a9d3a", "predicted span": "#d62728", "segment captions": "#7fa7e0",
                "transcript": "#f2a950", "asked clip": "#8c6bb1"}


def _name(text: str) -> str:
    """A file name for an id (question ids come from datasets)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)


def question_file(row: dict) -> str:
    return f"questions/{_name(row['run_key'])}_{_name(row['qid'])}.html"


def outcome(row: dict, question: dict) -> str:
    """failed (LLM errors), refused (by the endpoint), invalid, unknown (no ground truth), right or wrong."""
    if not row["valid"]:
        return not_an_answer(row.get("error") or "")
    value = score(row, question)
    if value is None:
        return "unknown"
    return "right" if (value == 1.0 if row["task"] == "mcq" else value >= RIGHT_FROM) else "wrong"


def _headline(step: dict) -> str:
    """What a trace step did: its tool, else its kind."""
    return step.get("tool") or step.get("kind", "step")


def _figure(figure: go.Figure) -> dict:
    """A figure as the JSON Plotly.newPlot takes (the page's script draws it)."""
    return json.loads(figure.to_json())


def cost_figure(points: list[dict]) -> dict:
    """Score against tokens per question: one colour per run (two runs of a method apart), a point per
    task with its 95% interval as an error bar."""
    figure = go.Figure()
    most = max((p["tokens"] for p in points), default=0) or 1.0
    runs = sorted({(p["method"], p["run_key"]) for p in points})
    for method, key in runs:
        mine = [p for p in points if p["run_key"] == key]
        # A method's name alone unless it has several runs: then the end of each one's key tells them apart.
        name = method if sum(m == method for m, _ in runs) == 1 else f"{method} …{key[-6:]}"
        figure.add_scatter(
            name=name, mode="markers", x=[p["tokens"] for p in mine], y=[p["score"] for p in mine],
            marker={"size": 11, "symbol": [{"mcq": "circle", "rtl": "diamond", "open": "square"}[p["task"]]
                                           for p in mine]},
            error_y={"type": "data", "symmetric": False, "array": [p["high"] - p["score"] for p in mine],
                     "arrayminus": [p["score"] - p["low"] for p in mine]},
            customdata=[[p["run_key"], p["task"], METRIC[p["task"]]] for p in mine],
            hovertemplate="%{customdata[0]}<br>%{customdata[1]}: %{customdata[2]} %{y:.3f}<br>"
                          "%{x:.0f} tokens per question<extra>" + name + "</extra>")
    figure.update_layout(
        height=380, margin={"l": 70, "r": 20, "t": 20, "b": 60}, legend_title_text="run",
        # A little room left of 0, so a method that asks no LLM is not cut in half by the axis.
        xaxis={"title": {"text": "tokens per question"}, "range": [-0.04 * most, 1.08 * most]},
        yaxis={"title": {"text": "score (accuracy, mIoU or token F1)"}, "range": [0, 1.05]})
    return _figure(figure)


def timeline_figure(duration: float, lanes: dict[str, list[tuple[float, float, str]]],
                    visits: list[tuple[int, float, str]]) -> dict:
    """The video on a time axis in seconds: a lane of bars per artifact or span (hover: its text), and a
    lane of the frames visited, one mark per visit labelled with its step."""
    figure = go.Figure()
    for lane, spans in lanes.items():
        if spans:
            figure.add_bar(
                name=lane, orientation="h", y=[lane] * len(spans), base=[s for s, _, _ in spans],
                x=[max(e - s, duration / 400) for s, e, _ in spans], marker_color=LANE_COLOURS.get(lane, "#999"),
                marker_line={"color": "white", "width": 1}, customdata=[[s, e, text] for s, e, text in spans],
                hovertemplate="%{customdata[0]:.1f}-%{customdata[1]:.1f} s<br>%{customdata[2]}<extra></extra>")
    if visits:
        figure.add_scatter(
            name="visited", mode="markers+text", y=["visited"] * len(visits), x=[t for _, t, _ in visits],
            text=[str(step) for step, _, _ in visits], textposition="top center",
            marker={"symbol": "line-ns-open", "size": 16, "line": {"width": 2},
                    "color": [step for step, _, _ in visits], "colorscale": "Viridis"},
            customdata=[[step, tool] for step, _, tool in visits],
            hovertemplate="%{x:.1f} s, step %{customdata[0]} (%{customdata[1]})<extra></extra>")
    figure.update_layout(
        barmode="overlay", showlegend=False, height=80 + 34 * (len(figure.data) or 1),
        margin={"l": 130, "r": 20, "t": 10, "b": 45},
        xaxis={"title": {"text": "time (s)"}, "range": [0, duration], "showgrid": True},
        yaxis={"autorange": "reversed", "type": "category"})
    return _figure(figure)


class ReportWriter:
    def __init__(self, store: Store, out: Path, prices: dict | None = None, defaults: dict[str, dict] | None = None):
        # prices: USD per 1M input / output tokens per model (config `prices`); defaults: each method
        # option's flattened default settings, to show what a run changed.
        self.store, self.out, self.prices, self.defaults = store, Path(out), prices, defaults or {}
        self._written: set[str] = set()
        self._recorded: dict[str, dict] | None = None
        self._videos: dict[str, dict] = {}
        self._artifacts: dict[tuple, dict] = {}
        self.pages = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                                        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
        self.pages.globals["format_score"] = format_score
        self.pages.globals["coverage"] = coverage
        self.pages.globals["format_categories"] = format_categories

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

    def _render(self, path: str, template: str, **values) -> None:
        depth = path.count("/")
        (self.out / path).write_text(self.pages.get_template(template).render(up="../" * depth, **values))

    def _thumbs(self, video_id: str, frames: list) -> list[dict]:
        """The frames that have pixels (a captions-only store's have none), each written once into thumbs/."""
        thumbs = []
        for frame in frames:
            if frame.jpeg:
                name = f"thumbs/{_name(video_id)}_{frame.frame_index}.jpg"
                if name not in self._written:
                    (self.out / name).write_bytes(frame.jpeg)
                    self._written.add(name)
                thumbs.append({"src": name, "t": frame.timestamp})
        return thumbs

    def _frames_near(self, video_id: str, keys: dict, times: list[float]) -> list:
        """The stored frame nearest each time, in one read (none when the run had no frames)."""
        try:
            return self.store.frames_nearest_each(video_id, keys["frames"], times)
        except (ArtifactMissing, KeyError):
            return []

    def _video(self, video_id: str) -> dict:
        if video_id not in self._videos:  # read once per video, not per question
            self._videos[video_id] = self.store.video(video_id)
        return self._videos[video_id]

    def _artifact_rows(self, video_id: str, keys: dict) -> dict:
        """Every shown artifact of the video, by table (those whose rows span time draw on the timeline);
        read once per video and keys, not per question."""
        cached = (video_id, tuple(sorted(keys.items())))
        if cached not in self._artifacts:
            rows = {}
            for artifact in ARTIFACTS.values():
                if artifact.title:
                    try:
                        rows[artifact] = self.store.read(artifact, video_id, keys[artifact.stage])
                    except (ArtifactMissing, KeyError):
                        pass
            self._artifacts[cached] = rows
        return self._artifacts[cached]

    def _runs(self, by_run: dict) -> list[dict]:
        runs = []
        for (method, key), items in by_run.items():
            recorded = self._run(key)
            benchmark = run_benchmark(recorded)
            result = report(items, self.prices, benchmark)
            runs.append({"method": method, "key": key, "dataset": recorded.get("dataset"), "benchmark": benchmark,
                         "result": result,
                         "warnings": recorded.get("warnings", []), "usd": format_usd(result["costs"]),
                         "incomplete": incomplete_note(recorded, items), "problems": problem_lines(items),
                         "settings": beyond_defaults(recorded["settings"], self.defaults)
                         if "settings" in recorded and self.defaults else None})
        return runs

    def _comparison(self, runs: list[dict], rows: list[dict]) -> dict:
        """The runs scored on the questions all of them answered, per task and type, and each pair's
        paired difference."""
        compared = comparison([(run["method"], run["key"]) for run in runs], rows,
                              {run["key"]: run["benchmark"] for run in runs})
        tasks = defaultdict(list)
        for run in runs:
            for task, entry in compared["reports"][run["key"]]["tasks"].items():
                tasks[task].append({"run": run, "entry": entry, "value": format_score(entry, "95% CI ")})
        types = {task: sorted({t for e in entries for t in e["entry"]["per_type"]}) for task, entries in tasks.items()}
        categories = {task: sorted({c for e in entries for c in e["entry"]["per_category"]})
                      for task, entries in tasks.items()}
        return compared | {"tasks": dict(tasks), "types": types, "categories": categories,
                           "pairs": [pair | {"text": format_pair(pair)} for pair in compared["pairs"]]}

    def _question_page(self, item: dict, others: list[dict]) -> dict:
        row, question, predicted = item["row"], item["question"], item["prediction"]
        video = self._video(row["video_id"])
        keys = self._keys(row["run_key"], row["video_id"])
        trace = json.loads(row["trace_json"])
        lanes = {}
        if row["task"] == "rtl":
            lanes["true span"] = [(*question["answer"], "ground truth")] if question["answer"] else []
            lanes["predicted span"] = [(*predicted, f"{row['method']}'s answer")] if row["valid"] else []
        clip = question.get("clip")
        if clip:
            lanes["asked clip"] = [(*clip, "the part of the video the question is about")]
        for artifact, items in self._artifact_rows(row["video_id"], keys).items():
            if {"start", "end"} <= set(artifact.columns):
                lanes[artifact.title] = [(r.start, r.end, r.line()) for r in items]
        # A step's visits are in the time the method was shown: a clip's, from its start.
        offset = clip[0] if clip else 0.0
        # Traces recorded before visits were kept per step: the question's visits as one step 0.
        steps = [dict(step, visited=[offset + t for t in step["visited"]]) for step in trace if step.get("visited")] or (
            [{"step": 0, "tool": "steps not recorded", "visited": row["visited"]}] if row["visited"] else [])
        visits = [(step.get("step", 0), t, _headline(step))
                  for step in steps for t in step["visited"]]
        frames_by_step = [{"step": step.get("step", 0), "tool": _headline(step),
                           "frames": self._thumbs(row["video_id"], self._frames_near(row["video_id"], keys,
                                                                                     step["visited"]))}
                          for step in steps]
        return {"row": row, "question": question, "predicted": predicted, "video": video, "trace": trace,
                "video_file": f"{_name(row['video_id'])}.html",
                "outcome": item["outcome"], "score": item["score"], "others": others,
                "timeline": timeline_figure(video["duration"] or 1e-6, lanes, visits),
                "frames_by_step": frames_by_step, "visited": row["visited"],
                "steps": [{"number": s.get("step", ""), "headline": _headline(s),
                           "extras": [(k, s[k]) for k in ("confidence", "verdict", "seconds") if k in s],
                           "body": json.dumps({k: v for k, v in s.items() if k not in ("step", "kind")}, indent=1,
                                              ensure_ascii=False, default=str)} for s in trace]}

    def _video_page(self, video_id: str, keys: dict) -> dict:
        try:
            strip = self._thumbs(video_id, self.store.evenly_spaced_frames(video_id, keys["frames"], 24))
        except (ArtifactMissing, KeyError):
            strip = []
        return {"video": self._video(video_id), "strip": strip,
                "artifacts": [(a.title, [r.line() for r in items])
                              for a, items in self._artifact_rows(video_id, keys).items()],
                "done": sorted(self.store.done_stages(video_id), key=lambda d: d["stage"])}

    def write(self, run_keys: list[str] | None = None) -> Path:
        rows = self.store.predictions(run_keys or ())
        if not rows:
            raise ArtifactMissing(f"no predictions{' for ' + ', '.join(run_keys) if run_keys else ''} in "
                                  f"{self.store.uri}; run `vidprep answer` first")
        for folder in ("questions", "videos", "thumbs"):
            (self.out / folder).mkdir(parents=True, exist_ok=True)
        (self.out / "plotly.min.js").write_text(get_plotlyjs())
        for name in ("style.css", "report.js"):
            shutil.copyfile(TEMPLATES / name, self.out / name)
        rows.sort(key=lambda r: (r["method"], r["run_key"], r["qid"]))
        by_run = defaultdict(list)
        for row in rows:
            by_run[(row["method"], row["run_key"])].append(row)
        runs = self._runs(by_run)

        listing, by_qid = [], defaultdict(list)
        for row in rows:
            question = json.loads(row["question_json"])
            item = {"row": row, "question": question, "outcome": outcome(row, question), "score": score(row, question),
                    "prediction": json.loads(row["prediction_json"]), "href": question_file(row)}
            listing.append(item)
            by_qid[row["qid"]].append(item)
        for item in listing:
            others = by_qid[item["row"]["qid"]]
            # Methods disagree where their answers differ: the choice for multiple choice, else the outcome.
            answers = {json.dumps(o["prediction"]) if o["row"]["task"] == "mcq" and o["outcome"] in ("right", "wrong")
                       else o["outcome"] for o in others}
            item["disagree"] = len(others) > 1 and len(answers) > 1
            self._render(item["href"], "question.html", **self._question_page(item, others))

        videos = {}
        for row in rows:
            videos.setdefault(row["video_id"], self._keys(row["run_key"], row["video_id"]))
        for video_id, keys in videos.items():
            self._render(f"videos/{_name(video_id)}.html", "video.html", **self._video_page(video_id, keys))

        points = [{"method": run["method"], "run_key": run["key"], "task": task, "score": entry["score"],
                   "low": (entry["interval"] or (entry["score"],) * 2)[0],
                   "high": (entry["interval"] or (entry["score"],) * 2)[1],
                   "tokens": run["result"]["costs"]["tokens_per_question"]}
                  for run in runs for task, entry in run["result"]["tasks"].items() if entry["score"] is not None]
        self._render("index.html", "index.html", runs=runs, comparison=self._comparison(runs, rows),
                     metric=METRIC, cost_chart=cost_figure(points), named_problems=NAMED_PROBLEMS,
                     disagreements=len({item["row"]["qid"] for item in listing if item["disagree"]}))
        self._render("questions.html", "questions.html", listing=listing,
                     methods=sorted({r["method"] for r in rows}), types=sorted({r["qtype"] for r in rows}),
                     outcomes=["right", "wrong", "invalid", "failed", "refused", "unknown"], right_from=RIGHT_FROM)
        return self.out / "index.html"

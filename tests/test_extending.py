"""Extending vidprep from outside it, as the README counts it: a stage with its artifact, a tool, a method
and a benchmark, each one file in a folder of the user's own (plus the YAML that selects the method and
the benchmark), run end to end through the `vidprep` command."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from vidprep.jobs.config import load_config
from vidprep.pipeline.imported import import_captions
from vidprep.pipeline.precompute import precompute

# The console script `pip install` made, as a user runs it.
VIDPREP = str(Path(sys.executable).with_name("vidprep"))

# A stage: the mean brightness of each frame, written as an artifact of its own.
STAGE = '''
import dataclasses
import io

from PIL import Image, ImageStat

from vidprep.stages.base import Stage
from vidprep.store.artifacts import Artifact


@dataclasses.dataclass(frozen=True)
class Brightness:
    frame_index: int
    timestamp: float
    mean: float

    def line(self) -> str:
        return f"t={self.timestamp:.1f}s brightness {self.mean:.0f}"


BRIGHTNESS = Artifact("brightness", "brightness", Brightness, "frame_index", title="brightness")


@dataclasses.dataclass
class MeasureBrightness(Stage):
    artifact = BRIGHTNESS
    version = 1
    upstream = ("frames",)

    def run(self, video, frames):
        for batch in frames:
            yield [{"frame_index": f.frame_index, "timestamp": f.timestamp,
                    "mean": ImageStat.Stat(Image.open(io.BytesIO(f.jpeg)).convert("L")).mean[0]} for f in batch]
'''

# A tool over that artifact: the brightest moment between two times.
TOOL = '''
from vidprep.agents.tools import ToolResult, VideoTools, tool
from brightness_stage import BRIGHTNESS


class BrightnessTools(VideoTools):
    @tool
    def brightest(self, start: float, end: float) -> ToolResult:
        """The time in seconds, between `start` and `end`, of the brightest stored frame."""
        rows = [r for r in self.store.read(BRIGHTNESS, self.video_id, self.keys["brightness"])
                if start <= r.timestamp <= end]
        best = max(rows, key=lambda r: r.mean)
        return ToolResult(f"{best.timestamp:.1f}", 1.0, [best.timestamp], value=best.timestamp)
'''

# A method that answers "which part of the video is brightest" with that tool, without an LLM: the
# choices name equal parts of the video, in order.
METHOD = '''
from vidprep.agents.base import Agent


class BrightestPart(Agent):
    name = "brightest_part"

    def __init__(self, llm=None, margin_s: float = 0.0):
        super().__init__(llm)
        self.margin_s = margin_s

    def solve(self, question, tools, trace):
        found = tools.brightest(self.margin_s, tools.duration - self.margin_s)
        return min(int(found.value / tools.duration * len(question.choices)), len(question.choices) - 1)
'''

# A benchmark: its file format, its loader and the file its leaderboard reads.
BENCHMARK = '''
import json
from pathlib import Path

from vidprep.agents.base import Question
from vidprep.evaluation.benchmarks import Benchmark, json_file, video_path


def load(path: str, video_dir: str) -> list[Question]:
    items = json.loads(Path(path).read_text())
    return [Question(qid=item["id"], video=video_path(video_dir, item["video"]), task="mcq",
                     question=item["q"], choices=item["options"], answer=item["gold"], qtype="brightest")
            for item in items]


def leaderboard(rows: list[dict]) -> dict:
    return {r["qid"]: json.loads(r["prediction_json"]) for r in rows}


BENCHMARK = Benchmark("brightness_bench", load, ("brightest",),
                      leaderboards={"brightness_leaderboard.json": json_file(leaderboard)})
'''

# Each names its class (or function) as its schema: the class's parameters, defaults and types.
METHOD_YAML = """
defaults:
  - /schema@_here_: brightest_method.BrightestPart
  - _self_
"""

DATASET_YAML = """
name: brightness_bench
manifest: ${dataset.questions.video_dir}
make_sample: false
defaults:
  - /schema@questions: brightness_bench.load
  - _self_
questions:
  path: ???
  video_dir: ???
"""


def vidprep(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([VIDPREP, *args], capture_output=True, text=True, timeout=600, env=os.environ | env)


def test_a_stage_a_tool_a_method_and_a_benchmark_of_ones_own_run_end_to_end(tmp_path, sample_dir, ray_session):
    code = tmp_path / "mine"
    (code / "conf" / "method").mkdir(parents=True)
    (code / "conf" / "dataset").mkdir(parents=True)
    for name, text in (("brightness_stage", STAGE), ("brightness_tools", TOOL), ("brightest_method", METHOD),
                       ("brightness_bench", BENCHMARK)):
        (code / f"{name}.py").write_text(textwrap.dedent(text))
    (code / "conf" / "method" / "brightest.yaml").write_text(METHOD_YAML)
    (code / "conf" / "dataset" / "brightness_bench.yaml").write_text(DATASET_YAML)
    videos = tmp_path / "videos"
    videos.mkdir()
    (videos / "scenes.mp4").symlink_to(sample_dir / "scenes.mp4")
    # The sample's frames as stored: the cat and rocket scenes (0-8 s) at a mean grey of 53-54, the coffee
    # and astronaut scenes (8-16 s) at 87.
    questions = tmp_path / "questions.json"
    questions.write_text(json.dumps([{"id": "q1", "video": "scenes", "q": "Which half of the video is brighter?",
                                      "options": ["the first half", "the second half"], "gold": 1}]))
    env = {"PYTHONPATH": str(code)}
    common = [f"store.uri={tmp_path / 'db'}", f"hydra.searchpath=[file://{code / 'conf'}]",
              "dataset=brightness_bench", f"dataset.questions.path={questions}", f"dataset.questions.video_dir={videos}",
              "ray.progress_bars=false", f"hydra.run.dir={tmp_path / 'outputs'}"]
    stages = [*(f"~stages.{name}" for name in ("frame_embeddings", "segment_captions", "frame_captions", "transcript",
                                               "summary")),
              "+schema@stages.brightness=brightness_stage.MeasureBrightness"]

    done = vidprep("precompute", *common, *stages, env=env)
    assert done.returncode == 0 and "'brightness': 16" in done.stdout, done.stderr[-3000:]
    # `show` prints any declared artifact under its title.
    # Commands that are not Hydra jobs compose the config without the job's own settings (hydra.*).
    store = common[0]
    shown = vidprep("show", "scenes", store, *stages, env=env)
    lines = shown.stdout.split("brightness:\n")[1].splitlines()[:16]
    assert lines[0].startswith("  t=0.0s brightness ") and lines[15].startswith("  t=15.0s brightness "), lines

    answered = vidprep("answer", *common, *stages, "method=brightest", "answer.tools=brightness_tools.BrightnessTools",
                       env=env)
    assert answered.returncode == 0, answered.stderr[-3000:]
    assert "1 questions, 1 answered now, 0 already answered, 0 invalid, 0 failed" in answered.stdout, answered.stdout
    run_key = answered.stdout.split("run ")[1].split()[0]

    evaluated = vidprep("evaluate", store, env=env)
    assert evaluated.returncode == 0 and "accuracy 1.000" in evaluated.stdout, evaluated.stdout + evaluated.stderr
    exported = vidprep("export", "--run", run_key, "--out", str(tmp_path / "export"), store, env=env)
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert json.loads((tmp_path / "export" / "brightness_leaderboard.json").read_text()) == {"q1": 1}
    sample = json.loads((tmp_path / "export" / "samples.jsonl").read_text().splitlines()[0])
    assert sample["prediction"] == 1 and sample["score"] == 1.0

    # Without the benchmark's module, its run still scores, plainly, and says why.
    plainly = vidprep("evaluate", store, env={})
    assert plainly.returncode == 0 and "accuracy 1.000" in plainly.stdout, plainly.stdout + plainly.stderr
    assert "benchmark module brightness_bench cannot be imported here" in plainly.stderr, plainly.stderr

    # Jobs that never import the user's module (this test's process has not) open its table by its stored
    # schema, compaction included.
    plain = [f"store.uri={tmp_path / 'db'}", "dataset=folder", f"dataset.manifest={videos}", "ray.progress_bars=false"]
    assert "brightness_stage" not in sys.modules
    again = precompute(load_config([*plain, *stages[:-1]]))
    assert (again.done, again.skipped, again.failed) == (0, 1, 0)
    captions = tmp_path / "captions.jsonl"
    captions.write_text("\n".join(json.dumps({"video": "clip", "t": t, "caption": f"a dog runs, second {t}"})
                                  for t in range(4)))
    imported = import_captions(load_config([store, "dataset=captions", f"dataset.captions.path={captions}",
                                            "dataset.captions.format=jsonl", "~stages.summary",
                                            "ray.progress_bars=false"]))
    assert (imported.done, imported.failed) == (1, 0)

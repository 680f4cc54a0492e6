"""IntentQA: NExT-QA's columns with the video in `video_id` (and NExT-QA's videos), scored as its
eval_intentqa.py (NExT-QA's rules)."""

from vidprep.agents.base import Question
from vidprep.evaluation.benchmarks import Benchmark, json_file
from vidprep.evaluation.benchmarks import nextqa


def load(csv_path: str, video_dir: str, video_map: str | None = None, video_column: str = "video_id") -> list[Question]:
    return nextqa.load(csv_path, video_dir, video_map, video_column)


BENCHMARK = Benchmark("intentqa", load, ("CW", "CH", "TN", "TC"),
                      leaderboards={"intentqa_results.json": json_file(nextqa.nextqa_results)})

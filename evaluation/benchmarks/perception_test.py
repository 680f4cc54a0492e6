"""The Perception Test's multiple-choice annotations, by area and reasoning."""

import json

from vidprep.agents.base import Question
from vidprep.conf.checks import ManifestError
from vidprep.evaluation.benchmarks import Benchmark, chosen, json_file, read_json, video_path


def load(json_path: str, video_dir: str) -> list[Question]:
    """The Perception Test's multiple-choice annotations (mc_question_{split}.json or all_{split}.json):
    {video_id: {metadata, mc_question: [{id, question, options, answer_id, area, reasoning, tag}]}}.
    The qtype is the question's area, its categories its area and its type of reasoning, the two axes
    its results are reported by. The video is {video_id}.mp4. The test split withholds answer_id, area
    and reasoning: its questions load unscored, without type or categories."""
    data = read_json(json_path, dict, "the Perception Test's annotations (a JSON object by video id)")
    questions = []
    for video, item in data.items():
        try:
            for mc in item["mc_question"]:
                questions.append(Question(
                    qid=f"{video}_{mc['id']}", video=video_path(video_dir, video), task="mcq", question=mc["question"],
                    choices=list(mc["options"]), answer=mc.get("answer_id"), qtype=mc.get("area", ""),
                    categories=[mc[axis] for axis in ("area", "reasoning") if axis in mc]))
        except (KeyError, TypeError) as error:
            raise ManifestError(f"{json_path}: video {video}: not a Perception Test entry ({error})") from error
    return questions


def perception_test_answers(rows: list[dict]) -> dict:
    """Its multiple-choice results as VideoLLaMA2's inference_video_mcqa_perception_test_mcqa.py writes
    them for the challenge: {video_id: [{id, answer_id, answer}]}; an invalid answer is answer_id -1 and
    an empty answer (that script picks option 2 instead)."""
    results: dict[str, list] = {}
    for row in rows:
        question = json.loads(row["question_json"])
        video, number = row["qid"].rsplit("_", 1)
        choice = chosen(row)
        results.setdefault(video, []).append({"id": int(number), "answer_id": choice,
                                              "answer": question["choices"][choice] if choice >= 0 else ""})
    return results


BENCHMARK = Benchmark("perception_test", load, leaderboards={"perception_test_mc_results.json":
                                                              json_file(perception_test_answers)})

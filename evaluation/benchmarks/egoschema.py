"""EgoSchema: questions.json and the published subset answers; the rest go to its grader."""

from vidprep.agents.base import Question
from vidprep.conf.checks import ManifestError
from vidprep.evaluation.benchmarks import Benchmark, chosen, json_file, read_json, video_path


def load(questions_json: str, answers_json: str | None, video_dir: str) -> list[Question]:
    """EgoSchema: questions.json (q_uid, question, option 0..4) and, where known, subset_answers.json
    ({q_uid: option}); questions without an answer are answered, not scored (the grader scores them)."""
    answers = read_json(answers_json) if answers_json else {}
    questions = []
    for number, item in enumerate(read_json(questions_json)):
        try:
            uid = item["q_uid"]
            questions.append(Question(
                qid=uid, video=video_path(video_dir, uid), task="mcq", question=item["question"],
                choices=[item[f"option {i}"] for i in range(5)], answer=answers.get(uid), qtype="egoschema",
            ))
        except (KeyError, TypeError) as error:
            raise ManifestError(f"{questions_json}: item {number}: not an EgoSchema question ({error})") from error
    return questions


def egoschema_answers(rows: list[dict]) -> dict:
    """The file EgoSchema's validate.py sends to its grading server: {q_uid: chosen option}; an
    invalid answer is -1, which matches no option."""
    return {r["qid"]: chosen(r) for r in rows}


def egoschema_kaggle(rows: list[dict]) -> str:
    """The CSV its Kaggle competition takes (its README's Option A): q_uid,answer; an invalid answer is
    -1, which matches no option."""
    answers = egoschema_answers(rows)
    return "q_uid,answer\n" + "".join(f"{uid},{answer}\n" for uid, answer in answers.items())


BENCHMARK = Benchmark("egoschema", load, leaderboards={"egoschema_answers.json": json_file(egoschema_answers),
                                                       "egoschema_kaggle.csv": egoschema_kaggle})

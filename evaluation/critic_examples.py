"""CAViAR's critic examples from real traces: for each question of a held-out answer run, every
strategy's trace as the critic reads it, a brief critique and the winning strategies (those whose
answer scores at least `WINNING_SCORE` by the benchmark's own scoring)."""

import json

from vidprep.evaluation.scoring import score
from vidprep.agents.base import Question, question_text

# A right choice; an IoU or token F1 of at least one half.
WINNING_SCORE = 0.5


def _scores(row: dict, strategies: list[dict]) -> list[float]:
    scores = []
    for strategy in strategies:
        candidate = {**row, "valid": True, "prediction_json": json.dumps(strategy["answer"])}
        try:
            scores.append(score(candidate))
        except (TypeError, ValueError, IndexError):
            scores.append(0.0)  # an answer that does not fit the task wins nothing
    return scores


def example(row: dict) -> tuple[str, int, int] | None:
    """The question's example text, how many of its strategies won and how many there are (None: no
    ground truth or no strategy traces in the row)."""
    question = Question(**json.loads(row["question_json"]))
    strategies = [s for s in json.loads(row["trace_json"]) if s["kind"] == "strategy"]
    if question.answer is None or not strategies:
        return None
    scores = _scores(row, strategies)
    winners = [s["strategy"] for s, value in zip(strategies, scores) if value >= WINNING_SCORE]
    losers = [f"strategy {s['strategy']} answered {json.dumps(s['answer'])}" for s in strategies
              if s["strategy"] not in winners]
    right = f"The right answer is {json.dumps(question.answer)}."
    critique = " ".join([right] + ([f"Strategies {', '.join(map(str, winners))} reached it."] if winners else [])
                        + ([f"{'; '.join(losers)}."] if losers else []))
    text = "\n".join([question_text(question)] + [s["shown"] for s in strategies]
                     + [f"Critique: {critique}", f"Winners: {json.dumps(winners)}"])
    return text, len(winners), len(strategies)


def critic_examples(rows: list[dict], count: int) -> list[str]:
    """Up to `count` examples, in question order: first those where some strategies won and some lost
    (they teach the critic most), then those where all won; a question no strategy got right names no
    winner and is left out."""
    mixed, all_won = [], []
    for row in sorted(rows, key=lambda r: r["qid"]):
        found = example(row)
        if found is None or found[1] == 0:
            continue
        text, won, total = found
        (all_won if won == total else mixed).append(text)
    return [f"Example {i}\n{text}" for i, text in enumerate((mixed + all_won)[:count], 1)]

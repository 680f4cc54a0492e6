"""Answering from the store against computing captions and summary per question."""

import time
from pathlib import Path

from hydra.utils import instantiate

from vidprep.agents.tools import VideoTools
from vidprep.evaluation.benchmarks import jsonl
from vidprep.jobs.bench.figures import BenchRun, Figure, _timed
from vidprep.jobs.bench.memory import run_or_raise
from vidprep.stages.probe import ProbeVideo
from vidprep.store.artifacts import FRAME_EMBEDDINGS
from vidprep.store.store import Store


def answer_figures(cfg, plan, store: Store, questions, ids: dict[str, str], scratch: Path) -> list[Figure]:
    llm = instantiate(cfg.llm.client)
    agent, vision = instantiate(cfg.method, llm=llm), instantiate(cfg.vision)
    embedder = plan.stages[FRAME_EMBEDDINGS.stage].embedder
    stored_seconds = fly_seconds = 0.0
    for number, question in enumerate(questions):
        tools = VideoTools(store, plan.keys, ids[question.video], embedder, vision)
        stored_seconds += _timed(agent.answer, question, tools)[0]

        started = time.perf_counter()
        fresh = Store(str(scratch / f"fly-{number}"))
        video = ProbeVideo().run(question.video)
        fresh.upsert("videos", [video | {"name": "", "stage_key": "probe", "row_id": video["video_id"]}])
        for name, stage in plan.stages.items():
            run_or_raise(fresh, stage, plan.keys[name], plan.inputs(name), video)
        agent.answer(question, VideoTools(fresh, plan.keys, video["video_id"], embedder, vision))
        fly_seconds += time.perf_counter() - started
    n = len(questions)
    return [Figure(f"seconds per question, {cfg.method._target_.rsplit('.', 1)[1]} on the sample",
                   "captions + summary computed per question (s)", fly_seconds / n, stored_seconds / n, "s")]


def figures(run: BenchRun) -> list[Figure]:
    _, _, store, plan = run.precomputed()
    questions = jsonl.load(str(run.sample / "questions.jsonl"))
    ids = {path: s["video_id"] for path, s in store.sources([q.video for q in questions]).items()}
    return answer_figures(run.run_cfg, plan, store, questions, ids, run.work)

"""Answering a dataset's questions with a method, on Ray Data over questions, through the runner's actor
pools as precompute's model stages run. Scores, tracking and exports are evaluation's (`vidprep.evaluation`).

Everything question-independent comes from the store; a method only calls the LLM layer (and the
vision backend for visual questions). Predictions, with their full traces, go to the store keyed by
the answer run's key (method config, prompts, LLM, vision backend and the precompute keys), so a
re-run answers only what is missing and a sweep reuses the same indexes.
"""

import dataclasses
import json
import os
import sys
import threading
import time
import uuid

import pyarrow as pa
import ray
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from vidprep.conf.checks import ArtifactMissing, ManifestError, ModelRefused
from vidprep.pipeline.plan import build_plan
from vidprep.pipeline.runner import init_ray, pool_map
from vidprep.store.settings import StoreSettings
from vidprep.pipeline.progress import Progress
from vidprep.evaluation.benchmarks import first_per_type
from vidprep.evaluation.scoring import NAMED_PROBLEMS, is_failure, is_refused, problem_lines
from vidprep.evaluation.tracking import provenance, run_settings
from vidprep.agents.base import Question
from vidprep.agents.vision import TEXT_QUERIES, stages_read
from vidprep.stages.media.files import is_uri
from vidprep.stages.base import Resources
from vidprep.stages.context import Usage, WorkerContext, counted
from vidprep.stages.models.llm import api_keys, check_endpoints
from vidprep.stages.prompts import is_prompt, prompt_hash
from vidprep.store.artifacts import FRAME_EMBEDDINGS
from vidprep.store.keys import stage_key
from vidprep.store.store import check_search_mode, utcnow


# What an answer run writes, a row per question or LLM call: compacted as the run goes (`store.compact`).
ANSWER_TABLES = ("predictions", "llm_cache")


def _prompt_hashes(config) -> dict[str, str]:
    """A hash of every prompt file a config names, so an edited prompt is a new run key."""
    found = {}
    for value in (config.values() if isinstance(config, dict) else config):
        if isinstance(value, (dict, list)):
            found.update(_prompt_hashes(value))
        elif is_prompt(value):
            found[value] = prompt_hash(value)
    return found


def run_key(cfg: DictConfig, keys: dict[str, str]) -> str:
    settings = run_settings(cfg)
    method, vision = settings["method"], settings["vision"]
    params = {
        "method": method, "method_version": get_class(method["_target_"]).version,
        "prompts": _prompt_hashes([method, vision]),
        "llm": settings["llm"]["client"],
        "vision": vision, "search": cfg.search.mode, "dataset": cfg.dataset.name, "tools": cfg.answer.tools,
    }
    return stage_key("answer", 1, params, keys)


def resolve_videos(store, questions: list[Question], keys: dict[str, str], captions_only: bool,
                   vlm_captions: bool = False) -> dict[str, str]:
    """Video file -> id for every question; ArtifactMissing naming the command that fills the store when
    any is not there (`import-captions` for a captions-only dataset), and with `vlm_captions` (the config
    names a vision-language captioner) how to answer from the offline describer's captions instead."""
    sources = store.sources(sorted({q.video for q in questions}))
    ids = {path: s["video_id"] for path, s in sources.items() if s["video_id"]}
    done = store.done_keys(set(ids.values()))
    missing = sorted({q.video for q in questions if q.video not in ids
                      or any((ids[q.video], k) not in done for k in keys.values())})
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        command = "import-captions" if captions_only else "precompute"
        raise ArtifactMissing(
            f"{len(missing)} videos have no complete precomputed artifacts for this config in {store.uri}: "
            f"{shown}. Run `vidprep {command}` with the same dataset, stages and model settings (the LLM "
            "included: the summaries are its output) first." + (
                " A store captioned by the offline describer is answered from with describer=shipped added (the "
                "run is then marked unlike its paper)." if vlm_captions else ""))
    return ids


def check_clips(store, questions: list[Question], ids: dict[str, str]) -> None:
    """ManifestError naming the first question whose clip starts at or after its video's end."""
    for question in questions:
        if question.clip:
            duration = store.video(ids[question.video])["duration"]
            if question.clip[0] >= duration:
                raise ManifestError(f"question {question.qid}: its clip {question.clip} starts after its video "
                                    f"{question.video} ends ({duration:.1f} s)")


# How often each answer worker tells the run's heartbeat what its questions are doing.
REPORT_S = 5.0


@ray.remote(num_cpus=0)
class QuestionsUnderWay:
    """The questions each answer worker has under way, as it last reported them: what the run's
    heartbeat says while no question finishes (a TraveLER question may take half an hour of calls)."""

    def __init__(self):
        self.by_worker: dict[str, list[dict]] = {}

    def report(self, worker: str, questions: list[dict]) -> None:
        self.by_worker[worker] = questions

    def questions(self) -> list[dict]:
        return [q for questions in self.by_worker.values() for q in questions]


def under_way(board, results: list[dict]) -> str:
    """The heartbeat's detail: the questions under way, the oldest one's step, and the calls so far."""
    questions = ray.get(board.questions.remote(), timeout=5)
    calls = sum(r["llm_calls"] for r in results) + sum(q["calls"] for q in questions)
    if not questions:
        return f"LLM calls so far: {calls}"
    oldest = max(questions, key=lambda q: q["seconds"])
    return (f"{len(questions)} under way, the oldest ({oldest['qid']}) for {oldest['seconds']:.0f} s, at step "
            f"{oldest['step']} ({oldest['kind'] or 'starting'}); LLM calls so far: {calls}")


class AnswerWorker:
    """One actor: builds the method, its LLM client, the vision backend and the text embedder once (its
    text model loaded at once where the method `searches` frames by text), and sets them up with the
    actor's context. Every REPORT_S it tells `board` (a QuestionsUnderWay) what its
    questions under way are doing."""

    def __init__(self, cfg_yaml: str, settings: StoreSettings, keys: dict, key: str, embedder: dict | None,
                 caption_frames: int | None, api_keys: dict | None = None, board=None, searches: bool = False):
        os.environ.update(api_keys or {})
        cfg = OmegaConf.create(cfg_yaml)
        self.context, self.keys, self.key = WorkerContext(settings.open()), keys, key
        self.store = self.context.store
        # Imported first: a tools class of one's own registers its tools before the method checks its names.
        self.tools = get_class(cfg.answer.tools)
        self.llm = instantiate(cfg.llm.client)
        self.agent = instantiate(cfg.method, llm=self.llm)
        self.vision = instantiate(cfg.vision)
        # None where the method reads no frame embeddings (it then never embeds a query).
        self.text_embedder = instantiate(embedder) if embedder else None
        for component in (self.agent, self.vision, self.text_embedder):
            if component is not None:
                component.setup(self.context)
        if searches and self.text_embedder is not None:
            # Loaded now rather than by the first search: questions waiting on a load keep no request in flight.
            self.text_embedder.embed_texts(["a query"])
        self.search_mode = cfg.search.mode
        # How many of a segment's frames its caption was made from (`Plan.frames_per_caption`).
        self.caption_frames = caption_frames
        # qid -> (when it started, its tools (their trace holds its steps), its calls per model so far).
        self.under_way: dict[str, tuple[float, object, dict]] = {}
        self.board, self.worker_id = board, uuid.uuid4().hex
        if board is not None:  # None: a worker built on its own tells nobody
            threading.Thread(target=self._report, daemon=True).start()

    def _report(self) -> None:
        while True:
            time.sleep(REPORT_S)
            now, questions = time.monotonic(), []
            for qid, (started, tools, per_model) in list(self.under_way.items()):
                steps = tools.trace.steps if tools.trace is not None else []
                questions.append({"qid": qid, "seconds": now - started, "step": len(steps),
                                  "kind": steps[-1]["kind"] if steps else "",
                                  "calls": sum(u.calls for u in list(per_model.values()))})
            self.board.report.remote(self.worker_id, questions)

    def __del__(self):
        for component in (getattr(self, name, None) for name in ("agent", "vision", "text_embedder")):
            if component is not None:
                component.teardown()

    def __call__(self, questions: pa.Table) -> pa.Table:
        return pa.Table.from_pylist([result for row in questions.to_pylist() for result in self.answer(row)])

    def answer(self, row: dict) -> list[dict]:
        """The outcome of the question `row` holds (question_json, video_id), and that of its reason
        question (reason_json) where its reply answers that too."""
        question = Question(**json.loads(row["question_json"]))
        started = time.monotonic()
        tools = self.tools(self.store, self.keys, row["video_id"], self.text_embedder, self.vision, self.search_mode,
                           question.clip, self.caption_frames)
        # Questions answered at once in this actor each count their own calls (`counted` is per thread).
        with counted() as per_model:
            self.under_way[question.qid] = (started, tools, per_model)
            try:
                prediction = self.agent.answer(question, tools)
            except ModelRefused as error:
                # Not this question's outcome: the run stops, and the question stays unanswered.
                return [{"qid": question.qid, "valid": False, "failed": True, "refused": False, "error": "",
                         "llm_calls": 0, "cache_hits": 0, "model_refused": str(error)}]
            finally:
                self.under_way.pop(question.qid, None)
        used = sum(per_model.values(), Usage())
        by_model = {model: {"calls": u.calls, "prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens}
                    for model, u in per_model.items()}
        outcomes = [self._record(question, row["question_json"], row["video_id"], prediction.answer, prediction, {
            "trace_json": json.dumps(prediction.trace, ensure_ascii=False, default=str),
            "visited": tools.visited, "llm_calls": used.calls, "cache_hits": used.cache_hits,
            "prompt_tokens": used.prompt_tokens, "completion_tokens": used.completion_tokens,
            "usage_json": json.dumps(by_model), "seconds": time.monotonic() - started})]
        if row.get("reason_json"):
            # Answered from the same frames; its calls and seconds are the answer question's, counted there once.
            reason = Question(**json.loads(row["reason_json"]))
            outcomes.append(self._record(reason, row["reason_json"], row["video_id"], prediction.reason, prediction, {
                "trace_json": json.dumps([{"step": 0, "kind": "answered_with", "qid": question.qid}]),
                "visited": tools.visited, "llm_calls": 0, "cache_hits": 0, "prompt_tokens": 0, "completion_tokens": 0,
                "usage_json": "{}", "seconds": 0.0}))
        return outcomes

    def _record(self, question: Question, question_json: str, video_id: str, answer, prediction,
                costs: dict) -> dict:
        self.store.record_prediction({
            "run_key": self.key, "qid": question.qid, "video_id": video_id, "method": self.agent.name,
            "task": question.task, "qtype": question.qtype, "question_json": question_json,
            "prediction_json": json.dumps(answer), "valid": prediction.valid, "error": prediction.error, **costs})
        return {"qid": question.qid, "valid": prediction.valid, "failed": is_failure(prediction.error),
                "refused": is_refused(prediction.error), "error": prediction.error, "llm_calls": costs["llm_calls"],
                "cache_hits": costs["cache_hits"], "model_refused": ""}


def asked_with_reasons(questions: list[Question], joint: bool) -> tuple[list[Question], dict[str, Question]]:
    """The questions as the method is asked them, and answer qid -> the reason question its reply also
    answers. A method that picks an answer and its reason in one reply (`joint`) answers a unit's reason
    question with the unit's answer question; any other is asked the reason question on its own, and the
    answer question without reasons (as it read before reasons existed)."""
    units: dict[str, list[Question]] = {}
    for question in questions:
        if question.unit:
            units.setdefault(question.unit, []).append(question)
    reason_of = {}
    for parts in units.values() if joint else ():
        asking, others = [q for q in parts if q.reasons], [q for q in parts if not q.reasons]
        if len(asking) == 1 and len(others) == 1:
            reason_of[asking[0].qid] = others[0]
    return [q if not q.reasons or q.qid in reason_of else dataclasses.replace(q, reasons=[])
            for q in questions], reason_of


@dataclasses.dataclass
class AnswerSummary:
    run_key: str
    method: str
    questions: int
    answered: int
    skipped: int
    invalid: int
    # Questions whose LLM calls failed past the retry budget (stored with the reason, asked again next run).
    failed: int
    # Questions the endpoint refused (stored with its message, asked again only with answer.retry_refused).
    refused: int
    # Where the questions were read from (the loader's files and folders, absolute).
    source: str
    llm_calls: int
    # Of those, the replies the store's LLM cache served (counted at the tokens they cost when made).
    cached_calls: int
    wall_seconds: float
    # What makes the run unlike its paper's (recorded with the run and marked in the report).
    warnings: list[str] = dataclasses.field(default_factory=list)
    # Each failed, refused or invalid question answered now: "QID: KIND: REASON" (the first NAMED_PROBLEMS).
    problems: list[str] = dataclasses.field(default_factory=list)
    unnamed_problems: int = 0

    def lines(self) -> list[str]:
        named = [f"  {problem}" for problem in self.problems]
        if self.unnamed_problems:
            named.append(f"  and {self.unnamed_problems} more (vidprep report lists every one)")
        return [f"warning: {w}" for w in self.warnings] + [f"questions read from {self.source}"] + [
                f"run {self.run_key} ({self.method}): {self.questions} questions, {self.answered} answered now, "
                f"{self.skipped} already answered, {self.invalid} invalid, {self.failed} failed, "
                f"{self.refused} refused by the endpoint; "
                f"LLM calls: {self.llm_calls} ({self.cached_calls} from the reply cache); "
                f"wall time {self.wall_seconds:.1f} s", *named,
                f"scores: vidprep evaluate --run {self.run_key}"]


def settled(stored: dict, asked_json: str | None, retry_refused: bool) -> bool:
    """Whether a stored prediction is the run's result for its question, not asked again: any outcome but
    a failure (LLM calls failed past the retry budget) and, with `retry_refused`, a refusal, as long as the
    question reads as asked now (a corrected annotation file is answered and scored anew)."""
    error = stored["error"] or ""
    return (stored["question_json"] == asked_json and not is_failure(error)
            and not (retry_refused and is_refused(error)))


def questions_source(loader: DictConfig) -> str:
    return ", ".join(f"{name}={os.path.abspath(value) if isinstance(value, str) and not is_uri(value) else value}"
                     for name, value in loader.items() if name != "_target_" and value is not None)


def answer(cfg: DictConfig, clock: float | None = None, stop_ray: bool = False) -> AnswerSummary:
    """The questions of `cfg.dataset` answered by `cfg.method` from the store; with `stop_ray` (the
    process's last run), Ray stops before the wall time is read, as its shutdown is waited for too."""
    started, clock = utcnow(), time.monotonic() if clock is None else clock
    check_search_mode(cfg.search.mode)
    # Imported first: a tools class of one's own registers its tools before the method checks its names.
    get_class(cfg.answer.tools)
    # Built here once so a bad method or vision setting is reported before any worker starts.
    agent, vision = instantiate(cfg.method, llm=instantiate(cfg.llm.client)), instantiate(cfg.vision)
    warnings = agent.unlike_its_paper()
    if agent.asks_visual_questions and not vision.sees_frames:
        warnings.append(f"{agent.name} asks visual questions, but no vision model sees the frames "
                        f"({cfg.vision._target_.rsplit('.', 1)[1]}): they are answered from what precompute "
                        "stored about them, so the method does not run as its paper does; use vision=vlm with a "
                        "vision-language endpoint")
    plan = build_plan(cfg.stages)
    describers = [getattr(plan.stages.get(name), "describer", None) for name in ("segment_captions", "frame_captions")]
    if agent.reads_captions and any(d is not None and not d.writes_captions for d in describers):
        warnings.append("its captions are ImageNet labels and text read off the frames (describer=shipped), not a "
                        "vision-language model's as in the papers: precompute and answer with describer=vlm (as the "
                        "paper experiments do)")
    # Before the first question, not after the last: a run that takes hours is not run blind.
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr, flush=True)
    settings = StoreSettings.from_config(cfg.store)
    store = settings.open()
    questions = instantiate(cfg.dataset.questions, _convert_="all")
    dataset_questions = len(questions)
    if cfg.answer.per_type:
        questions = first_per_type(questions, cfg.answer.per_type)
    if cfg.answer.limit:
        questions = questions[: cfg.answer.limit]
    # Only what the method reads must be there, and only that is part of its answers' key.
    read = stages_read(agent.stages_read(), vision)
    keys = {stage: key for stage, key in plan.keys.items() if read is None or stage in read}
    ids = resolve_videos(store, questions, keys, captions_only=plan.probe is None,
                         vlm_captions=any(d is not None and d.writes_captions for d in describers))
    check_clips(store, questions, ids)
    key = run_key(cfg, keys)
    questions, reason_of = asked_with_reasons(questions, agent.answers_reasons)
    asked = {q.qid: json.dumps(q.to_dict()) for q in questions}
    done = store.predictions([key], ["qid", "error", "question_json"])
    answered = {r["qid"] for r in done if settled(r, asked.get(r["qid"]), cfg.answer.retry_refused)}
    # A unit answered in one reply is asked again unless both its questions are answered.
    for qid, reason in reason_of.items():
        if not {qid, reason.qid} <= answered:
            answered -= {qid, reason.qid}
    reasons = {reason.qid for reason in reason_of.values()}
    pending = [{"question_json": asked[q.qid], "video_id": ids[q.video],
                "reason_json": asked[reason_of[q.qid].qid] if q.qid in reason_of else ""}
               for q in questions if q.qid not in answered and q.qid not in reasons]
    results = []
    # Recorded before the first question and again at the end: a run killed on the way is known for what
    # it asked, with its settings and the command that completes it.
    run_id = f"answer-{key}-{started.strftime('%Y%m%dT%H%M%S')}"
    record = {"run_key": key, "method": agent.name, "questions": len(questions), "dataset": cfg.dataset.name,
              "loader": cfg.dataset.questions._target_, "dataset_questions": dataset_questions, "keys": keys,
              "settings": run_settings(cfg), "provenance": provenance(cfg), "warnings": warnings}
    store.record_run(run_id, "answer", started, 0.0, json.dumps(record | {"finished": False}))
    if pending:
        check_endpoints(OmegaConf.to_container(cfg, resolve=True))
        init_ray(cfg.ray)
        board = QuestionsUnderWay.remote()
        worker_args = dict(cfg_yaml=OmegaConf.to_yaml(cfg, resolve=True), settings=settings, keys=keys,
                           key=key, embedder=plan.configs[FRAME_EMBEDDINGS.stage]["embedder"]
                           if FRAME_EMBEDDINGS.stage in keys else None,
                           caption_frames=plan.frames_per_caption, board=board,
                           searches=read is None or TEXT_QUERIES in read,
                           api_keys=api_keys(OmegaConf.to_container(cfg, resolve=True)))
        # One question per batch, so each finished question shows in the progress as it finishes. Where
        # the endpoint takes several requests at once, an actor answers twice as many questions at once
        # (questions are independent; the LLM client's slots hold the rest back), so while some read the
        # store or write their answer, others fill the endpoint's slots.
        concurrency = cfg.llm.client.concurrency
        answered_now = pool_map(ray.data.from_items(pending), AnswerWorker, "answer", worker_args,
                                Resources(cpus=cfg.answer.num_cpus, pool_size=cfg.answer.workers),
                                cfg.ray.gpu_memory_gb, calls_per_actor=2 * concurrency if concurrency > 1 else 1,
                                batch_size=1)
        every = cfg.store.compact_every_questions
        # A resumed run counts the questions stored before it as done.
        with Progress("questions", len(questions), done=len(answered),
                      detail=lambda: under_way(board, results)) as progress:
            for result in answered_now.iter_rows():
                if result["model_refused"]:
                    store.compact(ANSWER_TABLES)
                    raise ModelRefused(result["model_refused"])
                results.append(result)
                progress.advance(1, int(result["failed"] or result["refused"]))
                if every and len(results) % every == 0:
                    store.compact(ANSWER_TABLES)
        if every:
            store.compact(ANSWER_TABLES)
        ray.kill(board)
    if stop_ray:
        ray.shutdown()
    problems = problem_lines(results)
    summary = AnswerSummary(key, agent.name, len(questions), len(results), len(answered),
                            sum(not r["valid"] and not r["failed"] and not r["refused"] for r in results),
                            sum(r["failed"] for r in results), sum(r["refused"] for r in results),
                            questions_source(cfg.dataset.questions),
                            sum(r["llm_calls"] for r in results),
                            sum(r["cache_hits"] for r in results),
                            time.monotonic() - clock, warnings, problems[:NAMED_PROBLEMS],
                            max(0, len(problems) - NAMED_PROBLEMS))
    store.record_run(run_id, "answer", started, summary.wall_seconds,
                     json.dumps(record | dataclasses.asdict(summary) | {"finished": True}))
    return summary

"""Each method's control flow, pinned with a scripted OpenAI-compatible server on loopback, over
the real precomputed store of the sample (real tools, real sandbox)."""

import json

import pytest

from vidprep.evaluation.critic_examples import critic_examples
from vidprep.pipeline.plan import build_plan
from vidprep.evaluation.benchmarks import jsonl
from vidprep.agents.base import InvalidAnswer, Question, Trace, final_answer, question_text
from vidprep.agents.caviar import PROMPTS, CAViAR, VideoModules
from vidprep.agents.baselines import DirectAnswer, LLoVi
from vidprep.agents.tools import ToolResult, VideoTools, tool
from vidprep.agents.traveler import TraveLER
from vidprep.agents.videoagent2 import VideoAgent2
from vidprep.agents.vision import StoredDescriptions, VisionLanguageModel, stages_read
from vidprep.conf.checks import ArtifactMissing
from vidprep.stages.models.llm import LLMClient
from vidprep.store.artifacts import SEGMENT_CAPTIONS, TRANSCRIPTS
from vidprep.store.keys import content_id
from vidprep.jobs.bench.endpoint import ScriptedEndpoint
from tests.conftest import SCRIPTED_PROFILE


@pytest.fixture
def server():
    scripted = ScriptedEndpoint()
    yield scripted
    scripted.close()


@pytest.fixture
def setting(precomputed, sample_dir, embedder, server):
    cfg, store, _ = precomputed
    question = next(q for q in jsonl.load(str(sample_dir / "questions.jsonl")) if q.qid == "scenes_first")
    tools = VideoTools(store, build_plan(cfg.stages).keys, content_id(sample_dir / "scenes.mp4"), embedder,
                       StoredDescriptions())
    # One request at a time: the scripted replies are in the order the method asks them.
    llm = LLMClient(base_url=server.base_url, profile=SCRIPTED_PROFILE, cache=False, max_retries=0, concurrency=1)
    return question, tools, llm


def script(server, *replies: dict) -> None:
    server.script = [("reply", json.dumps(r)) for r in replies]


def kinds(prediction) -> list[str]:
    return [step["kind"] for step in prediction.trace]


def test_videoagent2_stops_once_confident(setting, server):
    question, tools, llm = setting
    script(server, {"reasoning": "the first scene shows a cat", "answer": 0, "confidence": 5})
    prediction = VideoAgent2(llm, confidence_threshold=4).answer(question, tools)
    assert prediction.valid and prediction.answer == 0
    # Phase 1's reads (summary, captions) are tool calls in the trace like any other.
    assert kinds(prediction) == ["tool", "tool", "memory", "answer", "stop"] and len(server.requests) == 1
    assert [s["tool"] for s in prediction.trace[:2]] == ["summary", "segment_captions"]
    memory = "\n".join(prediction.trace[2]["memory"])
    assert "Summary:" in memory and "Segment captions:" in memory and "[0-10s]" in memory


def test_videoagent2_plans_then_adjusts_until_confident(setting, server):
    question, tools, llm = setting
    script(server,
           {"reasoning": "r", "answer": 2, "confidence": 1},
           {"reasoning": "r", "steps": [{"tool": "search_frames", "arguments": {"query": "a cat", "k": None}}]},
           {"reasoning": "r", "answer": 2, "confidence": 2},
           {"reasoning": "r", "steps": [{"tool": "transcript", "arguments": {"start": 0, "end": 16}}]},
           {"reasoning": "r", "answer": 0, "confidence": 4})
    prediction = VideoAgent2(llm, confidence_threshold=4, max_steps=4).answer(question, tools)
    assert prediction.answer == 0
    assert kinds(prediction) == ["tool", "tool", "memory", "answer", "plan", "tool", "answer", "adjust_plan", "tool",
                                 "answer", "stop"]
    search = prediction.trace[5]
    assert search["tool"] == "search_frames" and search["visited"] and 0 < search["confidence"] <= 1
    adjust_prompt = server.requests[3]["messages"][1]["content"]
    assert "Previous plan" in adjust_prompt and "tool confidence" in adjust_prompt
    assert "Hello and welcome" in server.requests[4]["messages"][1]["content"]


def test_videoagent2_forces_an_answer_at_the_step_limit(setting, server):
    question, tools, llm = setting
    script(server,
           {"reasoning": "r", "answer": 1, "confidence": 3},
           {"reasoning": "r", "steps": [{"tool": "segment_captions", "arguments": {"start": 0, "end": 10}}]},
           {"reasoning": "r", "answer": 3, "confidence": 3})
    prediction = VideoAgent2(llm, confidence_threshold=5, max_steps=1).answer(question, tools)
    assert prediction.answer == 3 and prediction.trace[-1]["reason"] == "step limit: answer forced"


INITIAL = ["0.0", "4.0", "8.0", "12.0", "15.0"]


def user_prompt(request) -> str:
    return request["messages"][1]["content"]


def memory_in(request) -> dict:
    return json.loads(user_prompt(request).split("Information: ", 1)[1].split("\n")[0])


def test_traveler_works_frame_by_frame_and_replans_until_the_iteration_limit(setting, server):
    question, tools, llm = setting
    not_enough = {"explanation": "need the end", "enough_information": False, "plan_followed": True,
                  "answer": 0, "confidence": 1}
    asks = lambda n: [{"questions": [f"what animal is in frame {i}?"]} for i in range(n)]  # noqa: E731
    script(server, {"plan": "1. look"}, *asks(5), not_enough,
           {"plan": "2. look at 8 s"}, {"timestamp": 8.0}, *asks(3), not_enough,
           {"explanation": "cats", "answer": 4, "confidence": 2})
    agent = TraveLER(llm, window=3, questions=1, max_iterations=2, max_memory_chars=100_000)
    prediction = agent.answer(question, tools)
    assert prediction.answer == 4 and prediction.trace[-1]["reason"] == "iteration limit: answer forced"
    frames = [s["timestamps"] for s in prediction.trace if s["kind"] == "frames"]
    # The first iteration runs the Extractor on the initial frames; then a window of 3 frames 1 s apart.
    assert frames == [[0.0, 4.0, 8.0, 12.0, 15.0], [7.0, 8.0, 9.0]]
    first, after_first, after_second = [s["memory"] for s in prediction.trace if s["kind"] == "memory"]
    assert list(first) == INITIAL and all(len(items) == 1 for items in first.values())
    assert all(items[1:] == [f"Question - what animal is in frame {i}? Answer - " + items[1].split(" Answer - ")[1]]
               for i, items in enumerate(after_first.values()))
    assert list(after_second) == ["0.0", "4.0", "7.0", "8.0", "9.0", "12.0", "15.0"]
    # A new frame gets its caption and its answers; a frame already in memory keeps its caption.
    assert len(after_second["7.0"]) == 2 and after_second["7.0"][0] == next(
        s["result"] for s in prediction.trace if s.get("tool") == "describe_frame")
    assert after_second["8.0"][:2] == after_first["8.0"] and len(after_second["8.0"]) == 3
    asked = [s for s in prediction.trace if s.get("tool") == "visual_question"]
    assert [s["visited"] for s in asked] == [[t] for t in (0.0, 4.0, 8.0, 12.0, 15.0, 7.0, 8.0, 9.0)]

    requests = server.requests
    plan, retrieve, extract, evaluate = requests[7], requests[8], requests[9], requests[12]
    choices = question.choices[1]
    assert choices in user_prompt(requests[0]) and choices in user_prompt(evaluate)
    assert "need the end" in user_prompt(plan) and choices in user_prompt(plan)
    assert choices not in user_prompt(retrieve) and question.question in user_prompt(retrieve)
    assert f"Currently viewing second: {tools.duration / 2:.1f}" in user_prompt(retrieve)
    assert "Plan: 2. look at 8 s" in user_prompt(retrieve)
    assert choices not in user_prompt(extract) and "Plan: 2. look at 8 s" in user_prompt(extract)
    assert "viewing the frame at 7.0 s, which has the caption: " + after_second["7.0"][0] in user_prompt(extract)
    # Every frame of a window is asked about from the memory before it, as the public code batches them.
    assert memory_in(extract) == memory_in(requests[11]) == after_first
    assert memory_in(evaluate) == after_second
    assert {r["temperature"] for r in requests} == {1.0}


def test_traveler_answers_when_the_evaluator_is_satisfied(setting, server):
    question, tools, llm = setting
    script(server, {"plan": "look at the start"}, *[{"questions": ["a", "b", "c"]}] * 5,
           {"explanation": "seen", "enough_information": True, "plan_followed": True, "answer": 0, "confidence": 4})
    prediction = TraveLER(llm).answer(question, tools)
    assert prediction.answer == 0 and prediction.trace[-1]["reason"] == "evaluator: enough information"
    assert kinds(prediction).count("retrieve") == 0
    assert sum(1 for s in prediction.trace if s.get("tool") == "visual_question") == 15
    schema = server.requests[1]["response_format"]["json_schema"]["schema"]["properties"]["questions"]
    assert schema["maxItems"] == 3


def test_traveler_summarizer_keeps_one_entry_per_frame_within_the_budget(setting, server):
    # Published captions run to thousands of characters; unbounded, they overflowed a 4k-token context.
    question, tools, llm = setting
    script(server, {"plan": "look"}, *[{"questions": ["what animal is this?"]}] * 5,
           {key: [f"short {key}"] for key in INITIAL},
           {"explanation": "", "enough_information": True, "plan_followed": True, "answer": 0, "confidence": 4})
    prediction = TraveLER(llm, window=2, questions=1, max_memory_chars=400).answer(question, tools)
    assert prediction.valid and "summarize" in kinds(prediction)
    summarize = next(r for r in server.requests if "summarize the information" in r["messages"][0]["content"])
    schema = summarize["response_format"]["json_schema"]["schema"]
    assert schema["required"] == INITIAL and schema["additionalProperties"] is False
    # No more items than before, and all of them within the budget, with room in the reply for it.
    assert schema["properties"]["0.0"]["maxItems"] == 2 and schema["properties"]["0.0"]["items"]["maxLength"] == 40
    assert summarize["max_tokens"] == 400 // 3
    assert memory_in(server.requests[-1]) == {key: [f"short {key}"] for key in INITIAL}
    # Each item is clipped to its share: a window of 2 frames with a caption and one answer each.
    before = memory_in(summarize)
    assert all(len(item) <= 400 // 4 + len(" [...]") for items in before.values() for item in items)
    assert any(item.endswith(" [...]") for items in before.values() for item in items)


def every_task(*strategies: list[str]) -> dict:
    return {task: [list(s) for s in strategies] for task in ("mcq", "open", "rtl")}


def program(code: str) -> dict:
    return {"thought": f"try {code.splitlines()[0]}", "code": code}


def test_caviar_critic_sees_full_traces_and_falls_back_through_its_winners(setting, server):
    question, tools, llm = setting
    script(server,
           program("finish(9)"),
           program("x = 1 / 0"), program("finish(1)"),
           program("while True:\n    pass"), program("finish(2)"),
           {"critique": "strategy 1 looks best, then 3", "winners": [1, 3]})
    agent = CAViAR(llm, strategies=every_task(["retrieval_qa", "finish"], ["think", "finish"], ["find_when", "finish"]),
                   max_steps=3, step_time_limit_s=1)
    prediction = agent.answer(question, tools)
    # Strategy 1's choice 9 does not exist: the next winner's answer is the prediction.
    assert prediction.valid and prediction.answer == 2
    steps = {s["kind"]: s for s in prediction.trace}
    assert steps["verdict"]["winners"] == [1, 3] and steps["fallback"]["strategy"] == 1
    assert steps["chosen"]["strategy"] == 3
    results = [s for s in prediction.trace if s["kind"] == "program_result"]
    assert [s["strategy"] for s in results] == [1, 2, 2, 3, 3]
    assert "ZeroDivisionError" in results[1]["result"] and "TimeoutError" in results[3]["result"]
    critic = server.requests[-1]
    shown = critic["messages"][1]["content"]
    for needed in ("Strategy 3 (modules: find_when, finish)", "Step 1 thought: try x = 1 / 0", "ZeroDivisionError",
                   "Final answer: 9", "Step 2 thought: try finish(2)"):
        assert needed in shown
    assert "Winners: [2, 1]" in critic["messages"][0]["content"]
    assert critic["response_format"]["json_schema"]["schema"]["properties"]["winners"]["items"]["enum"] == [1, 2, 3]
    modules_shown = server.requests[0]["messages"][0]["content"]
    assert "def retrieval_qa(query: str, segment: dict = None)" in modules_shown and "def find_when" not in modules_shown


def test_caviar_without_a_valid_answer_in_any_strategy_is_invalid(setting, server):
    question, tools, llm = setting
    script(server, program("finish(7)"), program("finish('x')"), {"critique": "c", "winners": [2]})
    agent = CAViAR(llm, strategies=every_task(["finish"], ["finish"]))
    prediction = agent.answer(question, tools)
    assert not prediction.valid and "no strategy gave an answer" in prediction.error


def test_a_caviar_strategy_with_a_malformed_reply_is_dropped_before_the_critic(setting, server):
    question, tools, llm = setting
    script(server, program("finish(1)"), program("finish(2)"), {"critique": "strategy 3 is right", "winners": [3]})
    # Strategy 2's reply is no JSON, nor is its repair: that strategy is dropped, the question goes on.
    server.script[1:1] = [("reply", "I think the answer is 3"), ("reply", "finish(3)")]
    agent = CAViAR(llm, strategies=every_task(["think", "finish"], ["think", "finish"], ["think", "finish"]),
                   max_steps=1)
    prediction = agent.answer(question, tools)
    assert prediction.valid and prediction.answer == 2, prediction.error
    dropped = [s for s in prediction.trace if s["kind"] == "dropped"]
    assert [d["strategy"] for d in dropped] == [2] and "does not match the schema" in dropped[0]["reason"]
    critic = server.requests[-1]
    assert critic["response_format"]["json_schema"]["schema"]["properties"]["winners"]["items"]["enum"] == [1, 3]
    assert "Strategy 2" not in critic["messages"][1]["content"]


@pytest.mark.parametrize("code,valid", [("r = retrieval_qa('a cat')\nfinish(1)", True),
                                        ("r = retrieval_qa('a cat')\nprint(r)", False)])
def test_caviar_single_program_answers_only_through_finish_in_its_one_program(setting, server, code, valid):
    from hydra.utils import instantiate

    from vidprep.jobs.config import load_config

    question, tools, llm = setting
    script(server, program(code))
    agent = instantiate(load_config(["method=caviar_single_program"]).method, llm=llm)
    prediction = agent.answer(question, tools)
    assert (prediction.valid, prediction.answer) == ((True, 1) if valid else (False, None)), prediction.error
    assert len(server.requests) == 1 and [s["kind"] for s in prediction.trace].count("program_result") == 1
    if not valid:
        assert prediction.error.startswith("InvalidAnswer: no strategy gave an answer")


def test_caviar_self_evaluation_gathers_until_the_model_rates_its_answer_3_of_3(setting, server):
    from hydra.utils import instantiate

    from vidprep.jobs.config import load_config

    question, tools, llm = setting
    script(server, program("x = 1"), {"answer": 0, "confidence": 2}, program("y = 2"), {"answer": 1, "confidence": 3})
    agent = instantiate(load_config(["method=caviar_self_evaluation"]).method, llm=llm)
    prediction = agent.answer(question, tools)
    assert prediction.valid and prediction.answer == 1, prediction.error
    assert [s["kind"] for s in prediction.trace if s["kind"] in ("program", "self_evaluation")] == [
        "program", "self_evaluation", "program", "self_evaluation"]
    judged = server.requests[1]
    assert judged["response_format"]["json_schema"]["schema"]["properties"]["confidence"]["enum"] == [1, 2, 3]
    assert "Step 1 program:\nx = 1" in judged["messages"][-1]["content"]
    # The agent is told of no finish: the self-evaluation decides when the answer is final.
    assert "def finish" not in server.requests[0]["messages"][0]["content"]


def test_frames_viewed_count_the_frames_each_read_caption_was_made_from(setting, server):
    from vidprep.jobs.config import load_config

    question, tools, llm = setting
    # The caption stage made each segment's caption from 3 of its frames, evenly chosen; a model that
    # takes one image a request saw one.
    assert build_plan(load_config([]).stages).frames_per_caption == 3
    assert build_plan(load_config(["describer=vlm", "llm=openai", "profile@llm.client.profile=llava-1.6-vicuna-13b-vllm"]
                                  ).stages).frames_per_caption == 1
    tools.caption_frames = 3
    script(server, {"answer": 0, "confidence": 3})
    prediction = LLoVi(llm).answer(question, tools)
    assert prediction.valid
    # scenes.mp4: 16 frames at 1 fps, segments 0-10 and 10-16 s: frames 0, 4, 9 and 10, 12, 15 were captioned.
    assert sorted(set(tools.visited)) == [0.0, 4.0, 9.0, 10.0, 12.0, 15.0]
    # TraveLER's initial memory: the stored captions of 5 frames, each a frame viewed.
    tools.visited = []
    assert len(set(c.timestamp for c in tools.frame_captions())) == len(set(tools.visited)) == 5


def test_caviar_direct_strategy_and_segments_passed_between_modules(setting, server):
    question, tools, llm = setting
    script(server, {"answer": 0, "confidence": 3},
           program("seg = get_segment(0, 8)\nr = retrieval_qa('a cat', seg)\nprint(r['frames'])\nfinish(0)"),
           {"critique": "both agree", "winners": [2, 1]})
    agent = CAViAR(llm, strategies=every_task(["get_segment", "retrieval_qa", "finish"]),
                   direct={"mcq": "retrieval_qa"})
    prediction = agent.answer(question, tools)
    assert prediction.valid and prediction.answer == 0
    direct, in_segment = [s for s in prediction.trace if s.get("tool") == "retrieval_qa"]
    # The direct strategy asks the module the whole question with its choices and the reasoning guidance.
    assert question.choices[3] in direct["arguments"]["query"] and "reasoning" in direct["arguments"]["query"]
    assert in_segment["arguments"] == {"query": "a cat", "segment": {"start": 0.0, "end": 8.0}}
    printed = next(s for s in prediction.trace if s["kind"] == "program_result")["result"]
    used = json.loads(printed.split("printed:\n", 1)[1].splitlines()[0])
    assert used and all(0 <= t <= 8 for t in used)
    assert "Result of retrieval_qa" in server.requests[0]["messages"][1]["content"]


def test_caviar_find_when_slides_windows_and_returns_multi_second_ranges(setting, server):
    question, tools, llm = setting
    tools.trace = Trace(llm)
    modules = VideoModules(tools, tools.trace, PROMPTS, window_frames=4, transcript_chunk_chars=8000)
    ranges = modules.find_when("Egyptian cat").value
    # The sample's first scene (0-4 s) is a cat: the first window's frames are one range of several seconds.
    assert ranges[0]["start"] == 0.0 and ranges[0]["end"] >= 3.0 and "Egyptian cat" in ranges[0]["description"]
    assert all(r["end"] - r["start"] >= 1.0 for r in ranges)
    # Recall over precision: every window of 4 frames is searched.
    stored = tools.store.frames_in_range(tools.video_id, tools.keys["frames"], 0, tools.duration)
    assert tools.visited == [f.timestamp for f in stored]
    inside = modules.find_when("Egyptian cat", {"start": 8.0, "end": 16.0}).value
    assert all(r["start"] >= 7.5 for r in inside)
    with pytest.raises(ValueError, match="segment must be a value returned by get_segment"):
        modules.find_when("cat", "0-8")


def test_caviar_asr_understanding_reads_long_transcripts_in_parts(setting, server):
    question, tools, llm = setting
    tools.trace = Trace(llm)
    modules = VideoModules(tools, tools.trace, PROMPTS, window_frames=120, transcript_chunk_chars=40)
    spoken = tools.transcript().text
    script(server, *[{"answer": f"part says {i}"} for i in range(10)])
    result = modules.asr_understanding("what is said?")
    asked = [r["messages"][1]["content"] for r in server.requests]
    parts = [a.split(":\n", 1)[1].split("\nQuery:")[0] for a in asked[:-1]]
    assert len(parts) == -(-len(spoken) // 40) and asked[0].startswith(f"Transcript part 1 of {len(parts)}")
    assert all(len(p.rstrip()) <= 40 for p in parts) and "".join(p.replace("\n", "") for p in parts) == spoken
    assert asked[-1].startswith("Part 1: part says 0") and result.text == f"part says {len(asked) - 1}"


def test_critic_examples_are_real_traces_with_the_strategies_that_scored_as_winners(setting, server):
    question, tools, llm = setting
    assert question.answer == 0
    agent = CAViAR(llm, strategies=every_task(["finish"], ["finish"], ["finish"]))
    rows = []
    for qid, answers in (("c", [1, 2, 3]), ("b", [0, 0, 0]), ("a", [0, 1, 0])):
        script(server, *[program(f"finish({a})") for a in answers], {"critique": "c", "winners": [1]})
        trace = agent.answer(question, tools).trace
        rows.append({"qid": qid, "task": "mcq", "question_json": json.dumps(question.to_dict()),
                     "trace_json": json.dumps(trace)})
    examples = critic_examples(rows, 4)
    # Mixed outcomes first; a question no strategy got right names no winner and is left out.
    assert len(examples) == 2 and examples[0].startswith("Example 1\nQuestion: " + question.question)
    assert "Winners: [1, 3]" in examples[0] and "strategy 2 answered 1" in examples[0]
    assert "Strategy 2 (modules: finish):\nStep 1 thought: try finish(1)\nprogram:\nfinish(1)" in examples[0]
    assert examples[1].startswith("Example 2\n") and examples[1].endswith("Winners: [1, 2, 3]")


def test_an_unparseable_final_answer_is_invalid_not_a_guess(setting, server):
    question, tools, llm = setting
    server.script = [("reply", "I think it is the cat")] * 2
    prediction = VideoAgent2(llm).answer(question, tools)
    assert not prediction.valid and prediction.answer is None
    assert "LLMReplyError" in prediction.error and "I think it is the cat" in prediction.error


@pytest.mark.parametrize("reply, stored", [
    ({"start": 2.0, "end": 4.5}, [2.0, 4.5]),
    ({"start": 8.0, "end": 40.0}, [8.0, 10.0]),  # an end past the video is clamped to its end
    ({"start": 4.0, "end": 2.0}, None),  # inverted
    ({"start": 34.0, "end": 40.0}, None),  # starts after the video ends: would be stored as [34, 10]
    ({"start": -1.0, "end": 2.0}, None),
])
def test_a_span_is_stored_only_when_it_is_an_ordered_range_inside_the_video(reply, stored):
    question = Question("q", "v", "rtl", "When does the cat jump?")
    if stored is None:
        with pytest.raises(InvalidAnswer, match="is not a range inside the video"):
            final_answer(question, reply, 10.0)
    else:
        assert final_answer(question, reply, 10.0) == stored


class CountingTools(VideoTools):
    @tool
    def frame_count(self, start: float, end: float) -> ToolResult:
        """How many stored frames lie between two times in seconds."""
        frames = self.frames_in_range(start, end)
        return ToolResult(f"{len(frames)} frames", 1.0, [f.timestamp for f in frames])


def test_a_tool_registered_once_is_planned_shown_as_a_module_and_traced(setting, server):
    question, plain, llm = setting
    tools = CountingTools(plain.store, plain.keys, plain.video_id, plain.text_embedder, plain.vision)
    script(server, {"reasoning": "r", "answer": 1, "confidence": 1},
           {"reasoning": "r", "steps": [{"tool": "frame_count", "arguments": {"start": 0, "end": 4}}]},
           {"reasoning": "r", "answer": 0, "confidence": 5})
    prediction = VideoAgent2(llm, tools=["frame_count"]).answer(question, tools)
    plan = server.requests[1]
    assert "- frame_count(start, end): How many stored frames lie between two times in seconds." in \
        plan["messages"][0]["content"]
    assert plan["response_format"]["json_schema"]["schema"]["properties"]["steps"]["items"]["anyOf"][0][
        "properties"]["arguments"]["required"] == ["start", "end"]
    step = prediction.trace[5]
    assert (step["tool"], step["arguments"], step["result"], step["confidence"]) == (
        "frame_count", {"start": 0, "end": 4}, "5 frames", 1.0)
    assert step["visited"] == [0.0, 1.0, 2.0, 3.0, 4.0]

    server.requests.clear()
    # One strategy: no critic to ask.
    script(server, {"thought": "t", "code": "n = frame_count(0, 4)\nfinish(0 if n == '5 frames' else 1)"})
    prediction = CAViAR(llm, strategies=every_task(["frame_count", "finish"])).answer(question, tools)
    assert prediction.valid and prediction.answer == 0
    assert 'def frame_count(start: float, end: float):\n    """How many stored frames' in \
        server.requests[0]["messages"][0]["content"]
    assert [s["tool"] for s in prediction.trace if s["kind"] == "tool"] == ["frame_count"]
    assert len(server.requests) == 1


def test_direct_baseline_shows_evenly_spaced_frames_to_the_vision_model(setting, server):
    question, tools, llm = setting
    script(server, {"answer": 0, "confidence": 2})
    prediction = DirectAnswer(llm, frames=4).answer(question, tools)
    assert prediction.valid and prediction.answer == 0
    # Text only: one string, as text-only chat templates (llama.cpp's) need.
    shown = server.requests[0]["messages"][1]["content"]
    assert "\nStored descriptions of the frames:\n" in shown and shown.count("t=") == 4
    script(server, {"answer": 0, "confidence": 2})
    DirectAnswer(llm, frames=4, max_description_chars=100).answer(question, tools)
    lines = server.requests[-1]["messages"][1]["content"].split("frames:\n")[1].splitlines()[:4]
    assert all(len(line.split(": ", 1)[1]) <= 25 for line in lines)
    assert "Transcript" not in shown and shown.endswith(question_text(question))

    vlm = VisionLanguageModel(llm)
    with_vlm = VideoTools(tools.store, tools.keys, tools.video_id, tools.text_embedder, vlm)
    script(server, {"answer": 1, "confidence": 4})
    prediction = DirectAnswer(llm, frames=3, transcript=True).answer(question, with_vlm)
    parts = server.requests[-1]["messages"][1]["content"]
    assert [p["type"] for p in parts].count("image_url") == 3 and "Frame 3 at 15.0s:" in [p.get("text") for p in parts]
    assert "Hello and welcome" in parts[-1]["text"]
    # The trace names the frames it showed; the JPEGs stay in the store.
    assert prediction.answer == 1 and "(a JPEG frame)" in json.dumps(prediction.trace) and "base64" not in json.dumps(
        prediction.trace)


def test_llovi_records_every_artifact_it_reads(setting, server):
    question, tools, llm = setting
    script(server, {"answer": 0, "confidence": 3})
    prediction = LLoVi(llm).answer(question, tools)
    assert [s["tool"] for s in prediction.trace if s["kind"] == "tool"] == ["segment_captions", "transcript"]


def test_a_method_reads_the_stages_it_declares_and_no_other(setting, server):
    question, tools, llm = setting
    vision = StoredDescriptions()
    assert stages_read(LLoVi(llm).stages_read(), vision) == {"frames", "segment_captions", "transcript"}
    # TraveLER's frames, frame captions and what its vision backend reads: never the summary or speech.
    assert stages_read(TraveLER(llm).stages_read(), vision) == {"frames", "frame_captions"} | vision.reads
    assert stages_read(TraveLER(llm).stages_read(), VisionLanguageModel(llm)) == {"frames", "frame_captions"}
    # VideoAgent2's from the tools it may call, and the summary only where it reads one.
    assert stages_read(VideoAgent2(llm, tools=["transcript"], summary=False).stages_read(), vision) == {
        "frames", "segment_captions", "transcript"}
    # The tools hold the method to it: a read of a stage it did not declare is refused, naming the stage.
    declared = {s: k for s, k in tools.keys.items() if s in ("frames", "segment_captions")}
    narrow = VideoTools(tools.store, declared, tools.video_id, tools.text_embedder, vision)
    script(server, {"answer": 0, "confidence": 3})
    with pytest.raises(ArtifactMissing, match="stage transcript is not configured .* or not among the stages the "
                                               "method says it reads"):
        LLoVi(llm).answer(question, narrow)


def _schema(request) -> dict:
    return request["response_format"]["json_schema"]["schema"]


def test_videoagent2_reasons_before_it_answers_and_plans_and_weighs_tool_confidence(setting, server):
    question, tools, llm = setting
    script(server, {"reasoning": "r", "answer": 2, "confidence": 1},
           {"reasoning": "r", "steps": [{"tool": "search_frames", "arguments": {"query": "a cat", "k": None}}]},
           {"reasoning": "r", "answer": 0, "confidence": 5})
    prediction = VideoAgent2(llm).answer(question, tools)
    assert prediction.valid
    answer, plan = server.requests[0], server.requests[1]
    assert list(_schema(answer)["properties"])[0] == "reasoning" and list(_schema(plan)["properties"])[0] == "reasoning"
    for request in (answer, plan):
        system = request["messages"][0]["content"]
        assert "Think step by step first" in system and "tool confidence between 0" in system
    assert "(tool confidence " in server.requests[2]["messages"][1]["content"]


def test_videoagent2_ablations_switch_off_tool_confidence_plan_adjustment_reasoning_and_summary(setting, server):
    question, tools, llm = setting
    # Setting 3 of the paper (no tool confidence, no plan adjustment, no chain of thought), without S.
    script(server, {"answer": 2, "confidence": 1},
           {"steps": [{"tool": "segment_captions", "arguments": {"start": 0, "end": 8}},
                      {"tool": "transcript", "arguments": {"start": 0, "end": 16}}]},
           {"answer": 2, "confidence": 1}, {"answer": 1, "confidence": 2})
    agent = VideoAgent2(llm, tool_confidence=False, adjust_plan=False, chain_of_thought=False, summary=False)
    prediction = agent.answer(question, tools)
    # One plan, its two calls in turn, then the answer is forced: the plan is done.
    assert kinds(prediction) == ["tool", "memory", "answer", "plan", "tool", "answer", "tool", "answer", "stop"]
    assert [s["tool"] for s in prediction.trace if s["kind"] == "tool"] == ["segment_captions", "segment_captions",
                                                                            "transcript"]
    assert prediction.trace[-1]["reason"] == "plan done: answer forced" and prediction.answer == 1
    assert not any("Summary:" in line for line in prediction.trace[1]["memory"])
    for request in server.requests:
        assert "reasoning" not in _schema(request)["properties"]
        text = request["messages"][0]["content"] + request["messages"][1]["content"]
        assert "confidence between 0" not in text and "(tool confidence" not in text
        assert "Think step by step" not in text


def test_tool_confidences_share_one_scale(setting, sample_dir):
    question, tools, llm = setting
    # search: the best cosine similarity; captions: their describer's mean; speech: Whisper's word probability.
    hits = tools.store.search(tools.text_embedder.embed_texts(["a cat"])[0], tools.keys["frame_embeddings"],
                              tools.video_id, 5)
    assert tools.search_frames("a cat").confidence == max(h.score for h in hits)
    hybrid = VideoTools(tools.store, tools.keys, tools.video_id, tools.text_embedder, tools.vision, "hybrid")
    found = hybrid.search_frames("a cat")
    # The 4 frames of the cat scene are among the 5 hits.
    assert sum(t < 4.0 for t in found.timestamps) == 4 and 0 < found.confidence <= 1
    captions = tools.segment_captions(0, 8)
    assert 0 < captions.confidence <= 1
    speech = tools.transcript()
    assert 0.5 < speech.confidence <= 1
    # No speech: certain when the file has no audio track; 0.5 (cannot tell) when no speech was found.
    silent = VideoTools(tools.store, tools.keys, content_id(sample_dir / "places.mp4"), tools.text_embedder,
                        tools.vision)
    assert silent.transcript().confidence == 1.0
    assert tools.transcript(0.0, 0.5).confidence == 0.5
    assert tools.segment_captions(100, 200).confidence == 0.0


def test_a_question_about_a_clip_is_shown_the_clip_as_the_whole_video(setting, server):
    """STAR asks about start..end of a Charades video: every tool reads only that part, with times from
    its start (as the papers trim the clip), while the question's visits stay in the video's time."""
    question, tools, llm = setting
    # The coffee scene of scenes.mp4 (8-12 s); the cat is at 0-4 s, the speech at 1.0-8.7 s.
    clip = VideoTools(tools.store, tools.keys, tools.video_id, tools.text_embedder, tools.vision, clip=(8.0, 12.0))
    assert clip.duration == 4.0
    frames = clip.evenly_spaced_frames(3)
    stored = {f.frame_index: f for f in tools.store.frames_in_range(tools.video_id, tools.keys["frames"], 8.0, 12.0)}
    assert [(f.timestamp, f.jpeg) for f in frames] == [(stored[f.frame_index].timestamp - 8.0, stored[f.frame_index].jpeg)
                                                       for f in frames]
    assert frames[0].timestamp <= 0.5 and frames[-1].timestamp >= 3.5 and clip.visited == [8.0 + f.timestamp for f in frames]
    whole_video = tools.frame_descriptions(tools.frames_in_range(0.0, 3.9))
    assert not set(clip.frame_descriptions(frames).values()) & set(whole_video.values())
    assert clip.frames_at([100.0])[0].timestamp == frames[-1].timestamp
    hits = clip.search_frames("Egyptian cat", k=10)
    assert hits.timestamps and all(0.0 <= t <= 4.0 for t in hits.timestamps) and all(8.0 <= t <= 12.0 for t in clip.visited)
    # A segment caption reaches a clip only when every frame it was made from lies inside: neither of the
    # sample's segments (0-10 s, 10-16 s) lies inside 8-12 s; from 9 s on, the second one does.
    assert clip.segment_captions().text == "no segment in that range"
    late = VideoTools(tools.store, tools.keys, tools.video_id, tools.text_embedder, tools.vision, clip=(9.0, 16.0))
    second = tools.store.read(SEGMENT_CAPTIONS, tools.video_id, tools.keys["segment_captions"])[1]
    assert late.segment_captions().text == f"[1-7s] {second.caption}" and min(late.visited) >= 10.0
    # The summary tells of the whole video, the future of a clip included.
    assert late.summary().text.startswith("(no summary") and late.summary().confidence == 0.0
    # The speech (one segment at 0.7-7.8 s) seen from a clip that starts at 4 s: only the words said in it.
    said = [w for s in tools.store.read(TRANSCRIPTS, tools.video_id, tools.keys["transcript"]) for w in s.words
            if 4.0 <= w["start"] and w["end"] <= 8.0]
    speech = VideoTools(tools.store, tools.keys, tools.video_id, tools.text_embedder, tools.vision, clip=(4.0, 8.0)).transcript()
    assert said and speech.text == (f"[{said[0]['start'] - 4:.1f}-{said[-1]['end'] - 4:.1f}s] "
                                    + " ".join(w["word"] for w in said))
    assert "Hello" not in speech.text
    captions = clip.frame_captions()
    assert [c.position for c in captions] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert all(0.0 <= c.timestamp <= 4.0 and c.caption for c in captions)

    # An answer in time is given in the clip's time and kept in the video's.
    when = Question("clip_when", question.video, "rtl", "When is the cup on screen?", clip=[8.0, 12.0])
    script(server, {"start": 1.0, "end": 3.0, "confidence": 3})
    clip = VideoTools(tools.store, tools.keys, tools.video_id, tools.text_embedder, tools.vision, clip=(8.0, 12.0))
    prediction = DirectAnswer(llm, frames=4).answer(when, clip)
    assert prediction.answer == [9.0, 11.0]
    assert "Video length: 4.0 s" in json.dumps(server.requests[-1]["messages"][1]["content"])


def test_traveler_on_a_clip_starts_from_captions_of_the_clip_and_views_only_its_frames(setting, server):
    question, tools, llm = setting
    clip = VideoTools(tools.store, tools.keys, tools.video_id, tools.text_embedder, tools.vision, clip=(8.0, 12.0),
                      caption_frames=3)
    script(server, {"plan": "look"}, *[{"questions": ["what is on the table?"]}] * 5,
           {"explanation": "", "enough_information": False, "plan_followed": True, "answer": 0, "confidence": 1},
           {"plan": "look again"}, {"timestamp": 2.0}, *[{"questions": ["what is it?"]}] * 3,
           {"explanation": "seen", "enough_information": True, "plan_followed": True, "answer": 1, "confidence": 4})
    # A memory budget the stored descriptions stay within: no Summarizer call to script.
    prediction = TraveLER(llm, window=3, questions=1, max_memory_chars=50000).answer(question, clip)
    assert prediction.valid and prediction.answer == 1
    # The memory starts from captions at 0, .25, .5, .75 and 1 of the 4 s clip, keyed in the clip's time.
    assert list(prediction.trace[kinds(prediction).index("memory")]["memory"]) == ["0.0", "1.0", "2.0", "3.0", "4.0"]
    assert "Video length: 4.0 s" in server.requests[0]["messages"][1]["content"]
    # Every frame it looked at, the retrieved window at 1-3 s of the clip included, is one of the clip's: the
    # captions of the two segments the clip overlaps were made from frames outside it too, so it is not shown them.
    assert {9.0, 10.0, 11.0} <= set(clip.visited) and all(8.0 <= t <= 12.0 for t in clip.visited), clip.visited


@pytest.mark.parametrize("method", ["caviar", "traveler"])
def test_independent_parts_of_a_question_run_at_once_and_trace_as_one_at_a_time(setting, method):
    from vidprep.jobs.bench.endpoint import fitting_reply

    question, tools, _ = setting
    # Each reply depends on its request only, so the same question asks the same things at any concurrency.
    endpoint = ScriptedEndpoint(latency_s=0.2, reply=fitting_reply)
    runs = {}
    try:
        for concurrency in (1, 4):
            endpoint.reset()
            llm = LLMClient(base_url=endpoint.base_url, profile=SCRIPTED_PROFILE, cache=False, max_retries=0,
                            concurrency=concurrency)
            agent = (CAViAR(llm, strategies=every_task(["think", "finish"], ["retrieval_qa", "finish"],
                                                       ["find_when", "finish"]), max_steps=2)
                     if method == "caviar" else TraveLER(llm, window=3, questions=2, max_iterations=1))
            prediction = agent.answer(question, tools)
            steps = [{k: v for k, v in step.items() if k != "seconds"} for step in prediction.trace]
            runs[concurrency] = (endpoint.peak, prediction.answer, prediction.error, steps, list(tools.visited))
            tools.visited.clear()
    finally:
        endpoint.close()
    (one_peak, *one), (many_peak, *many) = runs[1], runs[4]
    assert one_peak == 1 and many_peak >= 3, (one_peak, many_peak)
    assert many == one and len(one[2]) > 10

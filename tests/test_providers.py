"""Every paper experiment against a scripted endpoint that refuses what each model's provider documents
it refuses (tests/provider_rules.py): response formats per model, images only for vision models, a
prompt past the context window. Each experiment's method, models and vision backend are built from its
config and answer the sample's questions over the real precomputed store."""

import dataclasses

import pytest
from hydra.utils import instantiate

from vidprep.agents.tools import VideoTools
from vidprep.evaluation.benchmarks import jsonl
from vidprep.jobs.bench.endpoint import ScriptedEndpoint, fitting_reply
from vidprep.jobs.config import config_groups, load_config
from vidprep.pipeline.plan import build_plan
from vidprep.store.keys import content_id
from tests.provider_rules import refusal


@pytest.fixture
def provider():
    endpoint = ScriptedEndpoint(reply=fitting_reply, refuse=refusal)
    yield endpoint
    endpoint.close()


def test_the_rules_refuse_what_the_providers_refuse(provider):
    ask = [{"role": "user", "content": "What is 6 x 7?"}]
    image = {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAAA"}}
    schema = {"type": "json_schema", "json_schema": {"name": "r", "strict": True, "schema": {
        "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}}}
    refused = {
        "json_schema on gpt-4-1106-preview": {"model": "gpt-4-1106-preview", "messages": ask, "response_format": schema},
        "JSON mode without the word": {"model": "gpt-3.5-turbo-0125", "messages": ask,
                                       "response_format": {"type": "json_object"}},
        "an image to a text model": {"model": "gpt-4-1106-preview", "messages": [
            {"role": "user", "content": [{"type": "text", "text": "What is it?"}, image]}]},
        "two images to LLaVA on vLLM": {"model": "llava-hf/llava-v1.6-vicuna-13b-hf", "messages": [
            {"role": "user", "content": [{"type": "text", "text": "What is it?"}, image, image]}]},
        "past the context": {"model": "gpt-3.5-turbo-0125", "messages": [{"role": "user", "content": "x" * 70000}]},
        "past the reply limit": {"model": "gpt-4-1106-preview", "messages": ask, "max_tokens": 5000},
    }
    assert {name: bool(refusal(body)) for name, body in refused.items()} == dict.fromkeys(refused, True)
    assert refusal({"model": "gpt-4o", "messages": ask, "response_format": schema, "max_tokens": 800}) is None


@pytest.mark.parametrize("name", config_groups()["experiment"])
def test_every_paper_experiment_answers_the_sample_within_its_providers_rules(name, provider, precomputed, sample_dir,
                                                                             embedder):
    cfg, store, _ = precomputed
    overrides = [f"+experiment={name}", f"llm.client.base_url={provider.base_url}", "llm.client.cache=false",
                 "llm.client.max_retries=0"]
    experiment = load_config(overrides)
    if "llm" in experiment.vision and experiment.vision.llm.base_url != experiment.llm.client.base_url:
        overrides += [f"vision.llm.base_url={provider.base_url}", "vision.llm.cache=false"]
        experiment = load_config(overrides)
    agent = instantiate(experiment.method, llm=instantiate(experiment.llm.client))
    vision = instantiate(experiment.vision)
    keys = build_plan(cfg.stages).keys
    questions = {}
    for question in jsonl.load(str(sample_dir / "questions.jsonl")):
        questions.setdefault(question.task, question)
    if agent.answers_reasons:
        # A Causal-VidQA answer question with its reasons: the reply's `reason` field stays within the rules too.
        mcq = questions["mcq"]
        questions["with reasons"] = dataclasses.replace(mcq, qid="with_reasons",
                                                        reasons=[f"because of {choice}" for choice in mcq.choices])
    for question in questions.values():
        tools = VideoTools(store, keys, content_id(sample_dir / question.video), embedder, vision)
        prediction = agent.answer(question, tools)
        # A fitting reply may place a span outside the video: the method's verdict, not the harness's.
        assert prediction.valid or "is not a range inside the video" in prediction.error, (name, prediction.error)
        assert (prediction.reason in range(len(question.reasons))) if question.reasons else prediction.reason is None
    assert provider.refused == [], name
    assert len(provider.requests) > 0, name

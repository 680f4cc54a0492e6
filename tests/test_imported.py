"""Captions-only stores from published captions: the real NExT-QA dev subset's VideoAgent captions,
imported, answered by the agents with the real local LLM, and scored per NExT-QA question type."""

import csv
import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from vidprep.jobs.config import load_config
from vidprep.pipeline.answer import answer
from vidprep.evaluation.exports import export_run
from vidprep.pipeline.imported import import_captions, named_video_id
from vidprep.evaluation.scoring import report
from vidprep.conf.checks import ArtifactMissing
from vidprep.agents.tools import VideoTools
from vidprep.agents.vision import StoredDescriptions
from vidprep.conf.checks import ConfigError
from vidprep.stages.imported import ImportedCaptions
from tests.conftest import SHARED_VIDEOS
from vidprep.jobs.bench.endpoint import ScriptedEndpoint, fitting_reply
from tests.official_scoring import official_nextqa_accuracy

NEXTQA_DEV = SHARED_VIDEOS.parent / "nextqa-dev"
pytestmark = pytest.mark.skipif(not (NEXTQA_DEV / "val.csv").exists(),
                                reason="shared/data/nextqa-dev is not on this machine")
# Three real videos (37, 17 and 20 s) keep the summaries' LLM calls few.
VIDEOS = ["8132842161", "5833145209", "9473479950"]


@pytest.fixture(scope="module")
def nextqa_subset(tmp_path_factory):
    """The dev subset cut to VIDEOS, in NExT-QA's own layout (val.csv + captions/{video}_cap.json)."""
    root = tmp_path_factory.mktemp("nextqa-dev")
    (root / "captions").mkdir()
    for video in VIDEOS:
        (root / "captions" / f"{video}_cap.json").write_bytes((NEXTQA_DEV / "captions" / f"{video}_cap.json").read_bytes())
    with open(NEXTQA_DEV / "val.csv", newline="") as f:
        reader = csv.DictReader(f)
        rows = [r for r in reader if r["video"] in VIDEOS]
        fields = reader.fieldnames
    with open(root / "val.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fields)
        writer.writeheader()
        writer.writerows(rows)
    return root, rows


def nextqa_config(store, root, *overrides):
    return load_config([f"store.uri={store}", "dataset=nextqa_dev", f"dataset.root={root}",
                        "ray.progress_bars=false", *overrides])


@pytest.fixture(scope="module")
def imported(tmp_path_factory, nextqa_subset, ray_session, local_llm):
    root, rows = nextqa_subset
    store_uri = tmp_path_factory.mktemp("captions-store") / "db"
    summary = import_captions(nextqa_config(store_uri, root))
    cfg = nextqa_config(store_uri, root)
    from vidprep.store.settings import StoreSettings

    return cfg, StoreSettings.from_config(cfg.store).open(), summary, rows


def test_import_writes_every_derived_artifact_for_each_video(imported):
    _, store, summary, _ = imported
    assert (summary.videos, summary.done, summary.failed) == (3, 3, 0), summary.failures
    captions = json.loads((NEXTQA_DEV / "captions" / "8132842161_cap.json").read_text())
    video = store.video(named_video_id("8132842161"))
    assert video["duration"] == len(captions) and video["codec"] == "captions-only"
    done = {d["stage"]: d for d in store.done_stages(video["video_id"])}
    assert set(done) == {"frame_captions", "frames", "segments", "frame_embeddings", "segment_captions",
                         "transcript", "summary"}
    assert done["frame_captions"]["rows"] == len(captions)
    assert done["segments"]["rows"] == 4 and done["segment_captions"]["rows"] == 4
    # Nothing of the video's audio was read: its transcript says so, not that it has no audio.
    assert done["transcript"]["detail"] == "not transcribed: the video is known only by its published captions"
    provenance = json.loads(store.scan("stage_configs", "stage = 'frame_captions'")["config_json"][0].as_py())
    assert provenance["params"]["format"] == "videoagent" and provenance["params"]["sha256"]


def test_reimport_is_a_no_op_and_a_changed_caption_file_is_a_new_key(imported, nextqa_subset):
    cfg, _, _, _ = imported
    again = import_captions(cfg)
    assert (again.skipped, again.stage_runs, again.llm_calls) == (3, 0, 0)
    root, _ = nextqa_subset
    before = ImportedCaptions(format="videoagent", path=str(root / "captions")).key({})
    edited = root / "edited"
    edited.mkdir()
    for file in (root / "captions").iterdir():
        edited.joinpath(file.name).write_text(file.read_text().replace("The image", "A picture"))
    assert ImportedCaptions(format="videoagent", path=str(edited)).key({}) != before


def test_search_and_visual_questions_run_over_the_stored_captions(imported, embedder):
    cfg, store, _, _ = imported
    from vidprep.pipeline.plan import build_plan

    keys = build_plan(cfg.stages).keys
    tools = VideoTools(store, keys, named_video_id("5833145209"), embedder, StoredDescriptions())
    hits = tools.search_frames("a bird bath made of stone", k=3)
    assert "bird bath" in hits.text.lower() and len(hits.timestamps) == 3
    answer_text = tools.visual_question("what is in the water?", [4.0]).text
    captions = json.loads((NEXTQA_DEV / "captions" / "5833145209_cap.json").read_text())
    assert captions["4"][:60] in answer_text
    # The real video may well have speech: the tool says no transcript was made, and is not sure of anything.
    said = tools.transcript()
    assert said.text.startswith("(no transcript was made: ") and said.confidence == 0.0


@pytest.fixture(scope="module")
def fitting_endpoint():
    server = ScriptedEndpoint(reply=fitting_reply)
    yield server
    server.close()


# Every method end to end on NExT-QA rows, one question each (llovi, one call a question, the first of each
# type). VideoAgent2 and LLoVi ask the real local LLM; TraveLER, CAViAR and the direct baseline, whose many
# long prompts would take minutes of the tiny model, ask an endpoint whose replies fit each request's schema:
# what they get from a captions-only store is what is tested here, and test_answer.py has each of them
# answer with the real local LLM. The summary stage is left out for them: it is keyed by the LLM's settings.
FITTING = ["~stages.summary", "llm=openai", "llm.client.model=scripted", "llm.client.cache=false"]


@pytest.mark.parametrize("method, selection, overrides", [
    ("videoagent2", "answer.limit=1", ["method.max_steps=1"]),
    ("llovi", "answer.per_type=1", []),
    ("traveler", "answer.limit=1", ["method.max_iterations=1", "method.questions=1", "method.window=1", *FITTING]),
    ("caviar", "answer.limit=1", ["method.max_steps=1", *FITTING]),
    ("direct", "answer.limit=1", FITTING),
])
def test_agents_answer_nextqa_from_captions_and_score_per_type(imported, fitting_endpoint, method, selection,
                                                               overrides):
    cfg, store, _, rows = imported
    if "llm=openai" in overrides:
        overrides = [*overrides, f"llm.client.base_url={fitting_endpoint.base_url}"]
    run_cfg = nextqa_config(cfg.store.uri, cfg.dataset.root, f"method={method}", selection, *overrides)
    summary = answer(run_cfg)
    # NExT-QA's finest types, as its eval_mc.py scores them (TP as TN).
    types = ["TN" if r["type"] == "TP" else r["type"] for r in rows]
    if selection.startswith("answer.limit="):
        expected = Counter(types[:int(selection.split("=")[1])])
    else:
        expected = {qtype: 1 for qtype in types}
    assert (summary.questions, summary.answered) == (sum(expected.values()),) * 2
    predictions = store.scan("predictions", f"run_key = '{summary.run_key}'").to_pylist()
    result = report(predictions)["tasks"]["mcq"]
    assert result["questions"] == summary.questions and result["invalid"] == summary.invalid == 0, [
        p["error"] for p in predictions]
    assert Counter(p["qtype"] for p in predictions) == expected


def test_the_exported_result_file_scores_in_nextqas_script_as_evaluate_scores_the_run(imported, tmp_path):
    cfg, store, _, rows = imported
    # A held-out split under a name of its own: the export follows the run's loader (NExT-QA's), not its name.
    summary = answer(nextqa_config(cfg.store.uri, cfg.dataset.root, "method=llovi", "answer.per_type=1",
                                   "dataset.name=nextqa_heldout"))
    written, incomplete = export_run(store, summary.run_key, tmp_path)
    # One question of each type of the dataset's: the file's name and a line say the run is incomplete.
    total = int(re.match(rf"incomplete: {summary.questions} of the dataset's (\d+) questions have an answer",
                         incomplete).group(1))
    assert total > summary.questions
    assert written[1] == tmp_path / f"nextqa_results.incomplete-{summary.questions}-of-{total}.json"
    results = json.loads(written[1].read_text())
    official = official_nextqa_accuracy([r for r in rows if f"{r['video']}_{r['qid']}" in results], results)
    entry = report(store.predictions([summary.run_key]))["tasks"]["mcq"]
    assert len(results) == summary.questions and official["all"] == pytest.approx(entry["score"] * 100)
    assert official == pytest.approx({**{t: v * 100 for t, v in entry["per_type"].items()},
                                      **{f[0].upper(): v * 100 for f, v in entry["per_category"].items()},
                                      "all": entry["score"] * 100})



def test_the_report_shows_nextqas_families_as_evaluate_scores_them(imported, tmp_path):
    from html import unescape

    from vidprep.evaluation.benchmarks import run_benchmark
    from vidprep.evaluation.report import ReportWriter
    from vidprep.evaluation.scoring import format_categories

    cfg, store, _, _ = imported
    key = answer(nextqa_config(cfg.store.uri, cfg.dataset.root, "method=llovi", "answer.per_type=1",
                               "dataset.name=nextqa_heldout")).run_key
    entry = report(store.predictions([key]), benchmark=run_benchmark(store.answer_runs()[key]))["tasks"]["mcq"]
    # What papers report: causal, temporal and descriptive accuracy.
    assert set(entry["per_category"]) == {"causal", "temporal", "descriptive"}
    page = unescape(ReportWriter(store, tmp_path).write([key]).read_text())
    assert f'<td class="categories">{format_categories(entry)}</td>' in page
    for family in ("causal", "temporal", "descriptive"):
        assert f'<th class="category">{family}</th>' in page

def test_a_corrected_annotation_is_answered_and_scored_anew(imported, tmp_path):
    cfg, store, _, rows = imported
    csv_path = tmp_path / "val.csv"
    shutil.copy(f"{cfg.dataset.root}/val.csv", csv_path)
    run = nextqa_config(cfg.store.uri, cfg.dataset.root, "method=random", "answer.limit=3",
                        f"dataset.questions.csv_path={csv_path}")
    first = answer(run)
    assert answer(run).answered == 0
    fixed = dict(rows[1], answer=str((int(rows[1]["answer"]) + 1) % 5))
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, list(rows[0]))
        writer.writeheader()
        writer.writerows([rows[0], fixed, *rows[2:]])
    again = answer(run)
    assert (again.answered, again.skipped) == (1, 2)
    stored = {p["qid"]: json.loads(p["question_json"]) for p in store.predictions([first.run_key])}
    assert stored[f"{fixed['video']}_{fixed['qid']}"]["answer"] == int(fixed["answer"])


def test_answering_with_other_llm_settings_than_the_import_names_import_captions(imported):
    cfg, _, _, _ = imported
    # VideoAgent2 reads the summary, which the import wrote with the import's LLM.
    other = nextqa_config(cfg.store.uri, cfg.dataset.root, "method=videoagent2", "answer.limit=1",
                          "llm.client.model=another-model")
    with pytest.raises(ArtifactMissing, match=r"Run `vidprep import-captions` with the same dataset, stages and model"):
        answer(other)


def test_the_dev_subsets_default_root_is_the_same_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("VIDPREP_NEXTQA_DEV", raising=False)
    monkeypatch.delenv("VIDPREP_SHARED_DATA", raising=False)
    roots = []
    for folder in (tmp_path / "one", tmp_path / "two" / "deeper"):
        folder.mkdir(parents=True)
        monkeypatch.chdir(folder)
        roots.append(load_config(["dataset=nextqa_dev"]).dataset.root)
    assert roots[0] == roots[1] and Path(roots[0]).is_absolute()
    # A checkout away from the shared folder (as on CI) names it.
    monkeypatch.setenv("VIDPREP_SHARED_DATA", str(NEXTQA_DEV.parent))
    root = Path(load_config(["dataset=nextqa_dev"]).dataset.root)
    assert (root / "val.csv").read_bytes() == (NEXTQA_DEV / "val.csv").read_bytes()


def test_caption_formats_read_the_same_captions(tmp_path):
    source = json.loads((NEXTQA_DEV / "captions" / "5833145209_cap.json").read_text())
    texts = [source[str(t)] for t in range(len(source))]
    (tmp_path / "llovi.json").write_text(json.dumps({"5833145209": texts}))
    (tmp_path / "captions.jsonl").write_text(
        "\n".join(json.dumps({"video": "5833145209", "t": t, "caption": c}) for t, c in enumerate(texts)))
    read = {fmt: ImportedCaptions(format=fmt, path=str(path)).captions for fmt, path in [
        ("videoagent", NEXTQA_DEV / "captions" / "5833145209_cap.json"), ("llovi", tmp_path / "llovi.json"),
        ("jsonl", tmp_path / "captions.jsonl")]}
    assert read["videoagent"] == read["llovi"] == read["jsonl"]
    assert read["jsonl"]["5833145209"][3] == (3.0, source["3"])


def test_bad_caption_sources_are_clear_errors(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"video": "a", "t": 0, "caption": "x"}\nnot json\n')
    with pytest.raises(ConfigError, match=r"bad.jsonl:2: not a caption line"):
        _ = ImportedCaptions(format="jsonl", path=str(tmp_path / "bad.jsonl")).captions
    with pytest.raises(ConfigError, match="format must be one of"):
        ImportedCaptions(format="srt", path=str(tmp_path / "bad.jsonl"))
    with pytest.raises(ConfigError, match="does not exist"):
        ImportedCaptions(format="llovi", path=str(tmp_path / "missing.json"))


def test_import_captions_command_loads_a_jsonl_without_a_dataset(tmp_path):
    captions = tmp_path / "captions.jsonl"
    captions.write_text("\n".join(json.dumps({"video": "clip", "t": t, "caption": f"a dog runs, second {t}"})
                                  for t in range(12)))
    done = subprocess.run([sys.executable, "-m", "vidprep.jobs.cli", "import-captions", "--format", "jsonl", str(captions),
                           f"store.uri={tmp_path / 'db'}", "ray.progress_bars=false", "~stages.summary",
                           "~stages.frame_embeddings"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "videos: 1 (1 done" in done.stdout
    bad = subprocess.run([sys.executable, "-m", "vidprep.jobs.cli", "import-captions", "--format", "llovi", str(captions),
                          f"store.uri={tmp_path / 'db'}"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "captions.jsonl: cannot read captions" in bad.stderr


def test_a_run_recorded_before_loaders_were_is_known_as_its_benchmark_by_its_recorded_config():
    from vidprep.evaluation.benchmarks import run_benchmark

    old = {"dataset": "nextqa_dev", "provenance": {"config": {"dataset": {
        "name": "nextqa_dev", "questions": {"_target_": "vidprep.evaluation.benchmarks.nextqa.load"}}}}}
    assert list(run_benchmark(old).leaderboards) == ["nextqa_results.json"]
    assert run_benchmark({"dataset": "star"}).headline == "mean of categories"

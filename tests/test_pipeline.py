"""The cached Ray pipeline end to end: real Ray, real LanceDB, real ffmpeg, the real embedding model."""

import json
import math
import shutil
import subprocess

import pytest

from vidprep.jobs.config import load_config
from vidprep.conf.checks import ArtifactMissing, ManifestError
from vidprep.pipeline.manifest import read_manifest
from vidprep.pipeline.plan import build_plan
from vidprep.pipeline.precompute import precompute
from vidprep.pipeline.runner import fit_resources, stage_resources, video_groups
from vidprep.conf.checks import ConfigError
from vidprep.store.artifacts import TRANSCRIPTS
from vidprep.store.keys import content_id
from vidprep.stages.base import Resources
from vidprep.stages.context import WorkerContext
from vidprep.stages.decode import DecodeFrames
from vidprep.stages.probe import ProbeVideo
from vidprep.store.settings import StoreSettings
from vidprep.store.store import Store
from tests.conftest import SHARED_VIDEOS, config_for, needs_shared_videos


def test_sample_precompute_summary(precomputed, sample_dir):
    _, store, summary = precomputed
    assert (summary.videos, summary.done, summary.failed, summary.duplicates) == (4, 3, 1, 1)
    assert summary.failures[0]["path"].endswith("corrupt.mp4")
    assert "Invalid data" in summary.failures[0]["error"]
    failures = store.scan("failures").to_pylist()
    assert [f["stage"] for f in failures] == ["probe"] and failures[0]["source_path"].endswith("corrupt.mp4")
    # `vidprep show` and `search` of that file give the stored reason, not "no video".
    from vidprep.jobs.search import resolve_video

    with pytest.raises(ArtifactMissing, match=r"corrupt.mp4 is not a video in the store .*: .*Invalid data"):
        resolve_video(store, str(sample_dir / "corrupt.mp4"))
    truth = json.loads((sample_dir / "scenes.json").read_text())
    assert summary.frames == sum(math.ceil(truth[v]["duration"]) for v in ("scenes.mp4", "places.mp4", "short.mp4"))


def test_same_content_under_two_names_is_one_video(precomputed, sample_dir):
    _, store, _ = precomputed
    ids = [v["video_id"] for v in store.videos()]
    assert len(ids) == 3 == len(set(ids))
    assert content_id(sample_dir / "scenes.mp4") in ids
    assert content_id(sample_dir / "scenes.mp4") == content_id(sample_dir / "scenes_copy.mp4")


def test_every_artifact_row_carries_its_stage_key(precomputed):
    cfg, store, _ = precomputed
    plan = build_plan(cfg.stages)
    frames = store.scan("frames", columns=["stage_key", "row_id"])
    assert set(frames["stage_key"].to_pylist()) == {plan.keys["frames"]}
    assert len(set(frames["row_id"].to_pylist())) == frames.num_rows
    configs = {r["row_id"]: json.loads(r["config_json"]) for r in store.scan("stage_configs").to_pylist()}
    assert configs[plan.keys["frames"]]["params"]["fps"] == 1.0
    assert configs[plan.keys["frame_embeddings"]]["upstream"] == {"frames": plan.keys["frames"]}


def test_second_run_skips_all_work(precomputed):
    cfg, store, first = precomputed
    before = {name: store.table(name).count_rows() for name in store.table_names() if name != "runs"}
    again = precompute(cfg)
    assert (again.done, again.skipped, again.failed, again.frames) == (0, 3, 1, 0)
    assert "file unchanged since" in again.failures[0]["error"]
    assert again.previous_wall_seconds is not None
    assert again.wall_seconds < 0.25 * first.wall_seconds
    after = {name: store.table(name).count_rows() for name in store.table_names() if name != "runs"}
    assert after == before


def test_a_video_keeps_every_name_manifests_gave_it(precomputed, sample_dir, tmp_path):
    cfg, store, _ = precomputed
    scenes = content_id(sample_dir / "scenes.mp4")
    # One folder gave the same content two names; a second manifest gives the known file a third.
    assert store.names(scenes) == ["scenes", "scenes_copy"]
    manifest = tmp_path / "renamed.csv"
    manifest.write_text(f"id,path\nclip-7,{sample_dir / 'scenes.mp4'}\n")
    again = precompute(config_for(cfg.store.uri, manifest))
    assert (again.done, again.failed, again.frames) == (0, 0, 0)
    assert store.names(scenes) == ["clip-7", "scenes", "scenes_copy"]
    for name in ("clip-7", "scenes", "scenes_copy"):
        assert store.video_ids_named(name) == {scenes}


def test_model_stage_pools_leave_a_small_local_ray_to_the_tasks_and_asked_cpus_are_fitted(tmp_path, ray_session):
    # The session's Ray has 2 CPUs; the CPU-holding model stages ask for 1 each on a cluster.
    cfg = config_for(tmp_path, tmp_path)
    plan = build_plan(cfg.stages)
    resources = stage_resources(cfg, plan)
    pools = [r.cpus * r.pool_size for n, r in resources.items() if plan.stages[n].stateful]
    assert set(pools) == {0}
    asked = stage_resources(config_for(tmp_path, tmp_path, "+resources.frame_embeddings.cpus=2",
                                       "+resources.transcript.cpus=2"), plan)
    assert asked["frame_embeddings"].cpus + asked["transcript"].cpus + asked["frames"].cpus <= 2
    on_a_cluster = stage_resources(config_for(tmp_path, tmp_path, "ray.address=auto"), plan)
    assert on_a_cluster["frame_embeddings"].cpus == 1


def test_fitting_keeps_roomy_resources_and_rejects_a_task_bigger_than_ray():
    roomy = {"frames": Resources(cpus=1), "embed": Resources(cpus=2, pool_size=2)}
    assert fit_resources(roomy, {"embed"}, 8) == roomy
    assert fit_resources(roomy, {"embed"}, 3)["embed"].cpus == 1  # 2 actors x 1 + 1 task = 3
    with pytest.raises(ConfigError, match="asks for 1 CPUs but this Ray has 0.5"):
        fit_resources(roomy, {"embed"}, 0.5)


def test_changed_parameter_writes_beside_the_old(tmp_path, sample_dir, precomputed):
    # The shared store, copied, holds the default run (`one`).
    shutil.copytree(precomputed[0].store.uri, tmp_path / "db")
    manifest = tmp_path / "one.csv"
    manifest.write_text(f"path,id\n{sample_dir / 'places.mp4'},places\n")
    one = config_for(tmp_path / "db", manifest)
    # The captions and the summary below them would only run again: no check reads them.
    two = config_for(tmp_path / "db", manifest, "stages.frames.fps=2", "~stages.segment_captions",
                     "~stages.frame_captions", "~stages.summary")
    precompute(two)
    store = StoreSettings.from_config(one.store).open()
    video_id = content_id(sample_dir / "places.mp4")
    key_one, key_two = build_plan(one.stages).keys, build_plan(two.stages).keys
    assert key_one["frames"] != key_two["frames"]
    assert key_one["segments"] == key_two["segments"]
    assert key_one["frame_embeddings"] != key_two["frame_embeddings"]
    assert len(store.frames_in_range(video_id, key_one["frames"], 0, 100)) == 10
    assert len(store.frames_in_range(video_id, key_two["frames"], 0, 100)) == 20
    assert store.video(video_id)["name"] == "places"


@needs_shared_videos
def test_odd_and_bad_files_are_reported_while_good_ones_complete_and_the_store_keeps_what_it_had(
        tmp_path, sample_dir, precomputed):
    from tests.test_resume import _snapshot

    (tmp_path / "empty.mp4").write_bytes(b"")
    (tmp_path / "notes.mp4").write_text("not a video\n" * 100)
    subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "color=c=red:s=64x48:d=0.04", "-frames:v", "1",
                    str(tmp_path / "single.mp4")], check=True)
    # A store that holds short.mp4 and more: a copy of the shared one.
    shutil.copytree(precomputed[0].store.uri, tmp_path / "db")
    store = StoreSettings.from_config(config_for(tmp_path / "db", sample_dir).store).open()
    kept = _snapshot(store)

    rows = [{"path": str(sample_dir / "short.mp4")}, {"path": str(SHARED_VIDEOS / "corrupted.mp4")},
            {"path": str(tmp_path / "empty.mp4")}, {"path": str(tmp_path / "missing.mp4"), "id": "ghost"},
            {"path": str(tmp_path / "notes.mp4")}, {"path": str(tmp_path / "single.mp4")},
            *({"path": str(SHARED_VIDEOS / n)} for n in ("video_90.mov", "nasa_13013.mp4", "h265_video.mp4"))]
    manifest = tmp_path / "videos.jsonl"
    manifest.write_text("\n".join(json.dumps(r) for r in rows))
    # Without the summary stage: the tiny LLM summarising NASA's transcript adds time and no check.
    cfg = config_for(tmp_path / "db", manifest, "~stages.summary")
    summary = precompute(cfg)
    reasons = {f["path"].rsplit("/", 1)[1]: (f["stage"], f["error"]) for f in summary.failures}
    # corrupted.mp4 decodes in part: done, with its frames, and listed as partial with ffmpeg's words.
    assert (summary.done, summary.skipped, summary.failed) == (5, 1, 3), summary.failures
    assert [(path.rsplit("/", 1)[1], "Invalid NAL unit size" in detail) for path, detail in summary.partial] == [
        ("corrupted.mp4", True)]
    assert reasons["empty.mp4"] == ("probe", "empty file (0 bytes)")
    assert reasons["missing.mp4"] == ("probe", "no such file")
    assert reasons["notes.mp4"][0] == "probe" and "Invalid data" in reasons["notes.mp4"][1]

    keys = build_plan(cfg.stages).keys
    ids = {n: content_id(p) for n, p in [("single", tmp_path / "single.mp4"), ("rotated", SHARED_VIDEOS / "video_90.mov"),
                                          ("nasa", SHARED_VIDEOS / "nasa_13013.mp4"),
                                          ("hevc", SHARED_VIDEOS / "h265_video.mp4")]}
    assert len(store.frames_in_range(ids["single"], keys["frames"], 0, 10)) == 1
    assert all(f.height > f.width for f in store.frames_in_range(ids["rotated"], keys["frames"], 0, 100))
    assert store.frames_in_range(ids["hevc"], keys["frames"], 0, 100)
    speech = store.read(TRANSCRIPTS, ids["nasa"], keys["transcript"])
    assert speech and any(s.text.strip() for s in speech)
    # Every row the store held before the bad inputs came is still there, unchanged.
    after = _snapshot(store)
    for table, rows_before in kept.items():
        assert {k: after[table].get(k) for k in rows_before} == rows_before, table


def test_videos_are_grouped_by_duration_yet_every_cpu_gets_two_groups():
    assert [len(g) for g in video_groups([{"duration": 3.0}] * 1000, 120, 2)] == [40] * 25
    assert [len(g) for g in video_groups([{"duration": 3.0}] * 100, 120, 2)] == [25] * 4
    assert [len(g) for g in video_groups([{"duration": 30.0}] * 4, 120, 2)] == [1] * 4
    assert [len(g) for g in video_groups([{"duration": d} for d in (3.0, 600.0, 3.0)], 120, 2)] == [1, 1, 1]


class _SpoiledFrames(DecodeFrames):
    """Frames whose rows the store refuses for one file (a width that is not a number)."""

    def run(self, video):
        frames = super().run(video)
        while True:
            try:
                batch = next(frames)
            except StopIteration as end:
                return end.value
            if video["source_path"].endswith("spoiled.mp4"):
                batch[0]["width"] = "wide"
            yield batch


def test_a_group_is_written_in_one_commit_and_a_failing_video_leaves_no_rows(tmp_path):
    from vidprep.pipeline.executor import run_stage

    paths = []
    for name, colour in (("a", "red"), ("gone", "green"), ("spoiled", "blue"), ("b", "yellow")):
        paths.append(tmp_path / f"{name}.mp4")
        subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", f"color=c={colour}:s=64x48:d=3:r=5",
                        "-pix_fmt", "yuv420p", str(paths[-1])], check=True)
    videos = [ProbeVideo().run(str(p)) for p in paths]
    paths[1].unlink()  # probed, then gone before its frames were decoded
    store = Store(str(tmp_path / "db"))
    stage = _SpoiledFrames()
    key = stage.key({})
    store.upsert("frames", [])  # the table exists: its versions count commits from here
    versions = store.table("frames").version
    outcomes = run_stage(WorkerContext(store), stage, key, [], videos, "run", "node")
    assert [o.rows for o in outcomes] == [3, 0, 0, 3]
    assert outcomes[0].error is None and outcomes[3].error is None
    assert "No such file" in str(outcomes[1].error) and "wide" in str(outcomes[2].error)
    done = store.done_keys(v["video_id"] for v in videos)
    assert done == {(videos[0]["video_id"], key), (videos[3]["video_id"], key)}
    assert sorted(store.scan("frames", columns=["video_id"])["video_id"].to_pylist()) == sorted(
        [videos[0]["video_id"]] * 3 + [videos[3]["video_id"]] * 3)
    # One commit for the group, refused; then each video apart: two videos written.
    assert store.table("frames").version - versions == 2
    again = run_stage(WorkerContext(store), stage, key, [], [videos[0], videos[3]], "run", "node")
    assert [o.rows for o in again] == [-1, -1]


def test_manifest_formats(tmp_path, sample_dir):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "m.csv").write_text("path,id\nscenes.mp4,s1\n")
    (tmp_path / "m.jsonl").write_text('{"path": "/abs/scenes.mp4"}\n')
    pq.write_table(pa.table({"path": ["x.mov"], "id": ["x"]}), tmp_path / "m.parquet")
    assert read_manifest(tmp_path / "m.csv").entries[0].name == "s1"
    assert read_manifest(tmp_path / "m.csv").entries[0].path == str(tmp_path / "scenes.mp4")
    # A path through `..` is stored normalised: one file, one path.
    (tmp_path / "man").mkdir()
    (tmp_path / "man" / "m.csv").write_text("path\n../vids/./a.mp4\n/abs//x/../b.mp4\n")
    assert [e.path for e in read_manifest(tmp_path / "man" / "m.csv").entries] == [str(tmp_path / "vids" / "a.mp4"),
                                                                                  "/abs/b.mp4"]
    assert read_manifest(tmp_path / "m.jsonl").entries[0].path == "/abs/scenes.mp4"
    assert read_manifest(tmp_path / "m.parquet").entries[0].name == "x"
    assert [e.name for e in read_manifest(sample_dir).entries] == ["corrupt", "places", "scenes", "scenes_copy", "short"]


@pytest.mark.parametrize("name,content,message", [
    ("bad.jsonl", '{"path": "a.mp4"}\n\n{not json', "line 3: not JSON"),
    ("bad.csv", "file\na.mp4\n", "missing 'path'"),
    # An unterminated quote would swallow the next row into this row's path.
    ("quote.csv", 'path,id\n"a.mp4,a\nb.mp4,b\n', "row starting on line 2: unexpected end of data"),
    ("quote2.csv", 'path,id\n"a.mp4,a\nb.mp4",b\nc.mp4,c\n', "row starting on line 2: a field spans lines 2-3"),
    ("extra.csv", "path,id\na.mp4,a,surplus\n", "row starting on line 2: more fields than the header"),
    ("dup.csv", "path,id\na.mp4,clip\nb.mp4,clip\n", "row starting on line 3: id 'clip' is already used"),
    ("clash.jsonl", '{"path": "x/clip.mp4"}\n{"path": "y/clip.mp4"}\n', "'clip.mp4' would stand for 2 files"),
    ("bad.txt", "a.mp4\n", "unknown manifest format"),
])
def test_malformed_manifest_names_the_file(tmp_path, name, content, message):
    (tmp_path / name).write_text(content)
    with pytest.raises(ManifestError, match=message) as error:
        read_manifest(tmp_path / name)
    assert name in str(error.value)


def test_manifest_names_are_unique_and_skipped_files_are_named(tmp_path, caplog):
    for name in ("clip.mp4", "clip.mov", "talk.m4a", "song.mp3", "notes.md", "sub/deep.mp4"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    flat = read_manifest(tmp_path)
    assert [e.name for e in flat.entries] == ["clip.mov", "clip.mp4"]
    assert [name.split(" (")[0] for name in flat.skipped] == ["song.mp3", "sub/", "talk.m4a"]
    assert flat.skipped[0].startswith("song.mp3 (not a media file ffmpeg reads: ")
    deep = read_manifest(tmp_path, recursive=True)
    assert [e.name for e in deep.entries] == ["clip.mov", "clip.mp4", "sub/deep"]
    assert [name.split(" (")[0] for name in deep.skipped] == ["song.mp3", "talk.m4a"]
    (tmp_path / "m.csv").write_text("path,id,label\nclip.mp4,,cat\nclip.mov,,dog\nsub/deep.mp4,d1,x\n")
    with caplog.at_level("WARNING"):
        listed = read_manifest(tmp_path / "m.csv")
    assert [e.name for e in listed.entries] == ["clip.mp4", "clip.mov", "d1"]
    assert "columns label are not used" in caplog.text


def test_a_folders_videos_are_chosen_by_content_and_every_other_file_is_named_with_its_reason(tmp_path):
    from tests.test_decode import ffmpeg

    # gradio's video_sample.ogg is Theora in Ogg: a video whatever its extension says.
    ffmpeg("-f", "lavfi", "-i", "testsrc2=s=160x120:r=10:d=1", "-c:v", "libtheora", tmp_path / "video_sample.ogg")
    ffmpeg("-f", "lavfi", "-i", "testsrc2=s=160x120:r=10:d=1", "-c:v", "libx264", "-f", "mp4", tmp_path / "no_extension")
    ffmpeg("-f", "lavfi", "-i", "sine=d=1", "-c:a", "libvorbis", tmp_path / "speech.ogg")
    ffmpeg("-f", "lavfi", "-i", "testsrc2=s=160x120", "-frames:v", "1", tmp_path / "still.png")
    (tmp_path / "dangling.mp4").symlink_to(tmp_path / "gone.mp4")
    (tmp_path / "loop.mp4").symlink_to(tmp_path / "loop.mp4")
    found = read_manifest(tmp_path)
    assert [e.name for e in found.entries] == ["no_extension", "video_sample"]
    assert found.skipped == [f"dangling.mp4 (a link to {tmp_path / 'gone.mp4'}, which does not exist)",
                             "loop.mp4 (a symbolic link loop)", "speech.ogg (no video stream: audio only)",
                             "still.png (an image)"]


def test_missing_manifest_is_a_clear_error(tmp_path):
    with pytest.raises(ManifestError, match="manifest not found"):
        read_manifest(tmp_path / "nope.csv")


def test_a_float_setting_given_as_an_int_keeps_its_stage_key():
    # `stages.frames.fps=1` on the command line must find what the default fps 1.0 stored.
    given = build_plan(load_config(["stages.frames.fps=1", "stages.segments.seconds=10"]).stages).keys
    assert given == build_plan(load_config([]).stages).keys

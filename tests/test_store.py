"""The read API over a precomputed store, text-to-frame search, and the ANN index."""

import multiprocessing
import time

import numpy as np
import pytest

from vidprep.pipeline.plan import build_plan
from vidprep.store.artifacts import FRAMES, SEGMENTS
from vidprep.store.keys import content_id
from vidprep.store.store import Store
from vidprep.conf.checks import ArtifactMissing


@pytest.fixture(scope="module")
def scenes(precomputed, sample_dir):
    cfg, store, _ = precomputed
    return store, build_plan(cfg.stages).keys, content_id(sample_dir / "scenes.mp4")


@pytest.mark.parametrize("query,start,end", [
    ("a cat", 0.0, 4.0), ("a rocket", 4.0, 8.0), ("a cup of coffee", 8.0, 12.0),
])
def test_text_search_finds_the_photos_scene_first(scenes, embedder, query, start, end):
    store, keys, video_id = scenes
    hits = store.search(embedder.embed_texts([query])[0], keys["frame_embeddings"], video_id, k=4)
    assert len(hits) == 4
    assert all(start <= hit.timestamp < end for hit in hits), hits
    assert hits[0].score > 0.3 and hits[0].description.startswith("Looks like:")


@pytest.mark.parametrize("mode", ["text", "hybrid"])
def test_full_text_and_hybrid_search_find_the_photos_scene_by_its_stored_description(scenes, embedder, mode):
    store, keys, video_id = scenes
    hits = store.search(embedder.embed_texts(["a cat"])[0], keys["frame_embeddings"], video_id, k=3, text="a cat",
                        mode=mode)
    assert len(hits) == 3 and all(0.0 <= hit.timestamp < 4.0 for hit in hits), hits
    # The score is the cosine similarity in every mode, so tools can compare hits across modes.
    every_frame = store.search(embedder.embed_texts(["a cat"])[0], keys["frame_embeddings"], video_id, k=16)
    cosine = {hit.timestamp: hit.score for hit in every_frame}
    assert all(hit.score == pytest.approx(cosine[hit.timestamp], abs=1e-4) for hit in hits)


def test_text_search_needs_the_words_while_hybrid_falls_back_on_the_vectors(scenes, embedder):
    store, keys, video_id = scenes
    query = embedder.embed_texts(["a kitten"])[0]
    # No stored description has the word "kitten"; the vectors still place it near the cat.
    assert store.search(query, keys["frame_embeddings"], video_id, k=3, text="a kitten", mode="text") == []
    hybrid = store.search(query, keys["frame_embeddings"], video_id, k=3, text="a kitten", mode="hybrid")
    assert len(hybrid) == 3 and all(0.0 <= hit.timestamp < 4.0 for hit in hybrid), hybrid
    from vidprep.conf.checks import ConfigError
    with pytest.raises(ConfigError, match="search.mode must be one of vector, text, hybrid, got 'fuzzy'"):
        store.search(query, keys["frame_embeddings"], video_id, mode="fuzzy")


def test_search_over_all_videos_ranks_the_right_video_first(scenes, embedder):
    store, keys, video_id = scenes
    hits = store.search(embedder.embed_texts(["a cat"])[0], keys["frame_embeddings"], None, k=3)
    assert {hit.video_id for hit in hits} == {video_id}


def test_read_api(scenes):
    store, keys, video_id = scenes
    in_range = store.frames_in_range(video_id, keys["frames"], 3.5, 6.0)
    assert [f.timestamp for f in in_range] == [4.0, 5.0, 6.0]
    assert in_range[0].jpeg[:2] == b"\xff\xd8"
    assert store.frame_nearest(video_id, keys["frames"], 7.4).timestamp == 7.0
    assert [f.timestamp for f in store.evenly_spaced_frames(video_id, keys["frames"], 5)] == [0, 4, 8, 11, 15]
    assert [(s.start, s.end) for s in store.read(SEGMENTS, video_id, keys["segments"])] == [(0, 10), (10, 16)]
    batches = list(store.read_batches(FRAMES, video_id, keys["frames"], batch_size=6))
    assert [len(b) for b in batches] == [6, 6, 4]


def test_unknown_key_is_a_clear_miss(scenes):
    store, _, video_id = scenes
    with pytest.raises(ArtifactMissing, match="frames-000000000000"):
        store.frames_in_range(video_id, "frames-000000000000", 0, 10)


def _rows(n: int, dim: int, rng) -> list[dict]:
    vectors = rng.normal(size=(n, dim)).astype(np.float32)
    return [
        {"row_id": f"v{i % 3}/k/{i}", "video_id": f"v{i % 3}", "stage_key": "k", "frame_index": i,
         "timestamp": float(i), "vector": v.tolist(), "model": "random", "description": None}
        for i, v in enumerate(vectors)
    ]


def _done(video_id: str, rows: int) -> dict:
    return {"video_id": video_id, "stage": "frame_embeddings", "stage_key": "k", "rows": rows, "detail": "",
            "seconds": 0.0, "node_id": "n", "run_id": "r"}


def test_ann_index_is_built_past_the_threshold_and_used(tmp_path):
    rng = np.random.default_rng(0)
    store = Store(str(tmp_path / "db"), ann_min_rows=2000)
    rows = _rows(3000, 32, rng)
    store.upsert("frame_embeddings_32", rows)
    store.mark_done([_done(video, 1000) for video in ("v0", "v1", "v2")])
    assert store.index_embeddings() == ["frame_embeddings_32"]
    target = rows[1234]
    hits = store.search(np.array(target["vector"]), "k", k=3)
    assert hits[0].timestamp == 1234.0 and hits[0].score == pytest.approx(1.0, abs=0.05)
    table = store.table("frame_embeddings_32")
    (vector_index,) = [index for index in table.list_indices() if index.columns == ["vector"]]
    name = vector_index.name
    assert vector_index.index_type == "IvfSq" and vector_index.index_details["metric_type"] == "COSINE"
    later = [dict(r, row_id=f"v3/k/{r['frame_index']}", video_id="v3") for r in _rows(3500, 32, rng)[3000:]]
    store.upsert("frame_embeddings_32", later)
    store.mark_done([_done("v3", 500)])
    assert store.index_embeddings() == []
    assert (table.index_stats(name).num_indexed_rows, table.index_stats(name).num_unindexed_rows) == (3000, 500)
    assert store.search(np.array(later[7]["vector"]), "k", k=1)[0].video_id == "v3"
    store.compact()
    # A later run's rows are folded into the index (LanceDB optimize keeps its trained partitions).
    assert (table.index_stats(name).num_indexed_rows, table.index_stats(name).num_unindexed_rows) == (3500, 0)
    assert [index.name for index in table.list_indices() if index.columns == ["vector"]] == [name]
    assert store.search(np.array(later[8]["vector"]), "k", k=1)[0].video_id == "v3"
    small = Store(str(tmp_path / "small"), ann_min_rows=2000)
    small.upsert("frame_embeddings_32", rows[:100])
    assert small.index_embeddings() == []


def test_every_table_keeps_scalar_indexes_on_its_keys_and_compaction_folds_new_rows_in(tmp_path):
    from vidprep.store.schema import scalar_indexes, schema_for, text_index

    store = Store(str(tmp_path / "db"))
    store.upsert("frame_embeddings_8", _rows(30, 8, np.random.default_rng(2)))
    store.mark_done([_done("v1", 10)])
    store.llm_remember("reply-key", "m", "{}", 1, 1)
    store.record_prediction({"run_key": "run", "qid": "q1", "video_id": "v1", "valid": True})
    for name in ("frame_embeddings_8", "stage_done", "llm_cache", "predictions"):
        table = store.table(name)
        assert {tuple(i.columns): i.index_type for i in table.list_indices()} == {
            (column,): {"BTREE": "BTree", "BITMAP": "Bitmap"}[kind] for column, kind in scalar_indexes(schema_for(name).names).items()
        } | ({("description",): "FTS"} if name.startswith("frame_embeddings") else {})
        assert text_index(name) == ("description" if name.startswith("frame_embeddings") else None)
    table = store.table("frame_embeddings_8")
    assert {table.index_stats(i.name).num_unindexed_rows for i in table.list_indices()} == {30}
    store.compact()
    assert {table.index_stats(i.name).num_indexed_rows for i in table.list_indices()} == {30}
    assert {table.index_stats(i.name).num_unindexed_rows for i in table.list_indices()} == {0}
    for query in ("video_id = 'v1'", "row_id = 'v1/k/4'", "stage_key = 'k'"):
        assert "ScalarIndexQuery" in table.search().where(query).explain_plan(), query
    assert "ScalarIndexQuery" in store.table("llm_cache").search().where("row_id = 'reply-key'").explain_plan()
    assert store.llm_cached("reply-key") == {"reply": "{}", "prompt_tokens": 1, "completion_tokens": 1}


def _in_two_processes(target, args_of) -> list[int]:
    """`target(*args_of(job))` in two fresh processes at once (jobs 0 and 1); their exit codes."""
    jobs = [multiprocessing.get_context("spawn").Process(target=target, args=args_of(job)) for job in range(2)]
    for job in jobs:
        job.start()
    for job in jobs:
        job.join(240)
    return [job.exitcode for job in jobs]


def _mark_and_compact(uri: str, job: int, videos: int) -> None:
    store = Store(uri)
    for i in range(videos):
        store.mark_done([_done(f"job{job}-v{i}", 1)])
        store.compact()


def test_two_processes_compacting_one_store_at_once_both_finish_with_every_row(tmp_path):
    """Compaction after every video in two jobs: one's commit loses the race to the other's (seen on CI as
    "Retryable commit conflict"); the loser retries or leaves the compacting to the other, never fails."""
    uri = str(tmp_path / "db")
    Store(uri).mark_done([_done("first", 1)])
    assert _in_two_processes(_mark_and_compact, lambda job: (uri, job, 15)) == [0, 0]
    assert Store(uri).table("stage_done").count_rows() == 31


def _mark_the_same_videos_done(uri: str, start: float, rounds: int) -> None:
    store = Store(uri)
    time.sleep(max(0.0, start - time.time()))
    for i in range(rounds):
        store.mark_done([_done(f"v{i}-{j}", 1) for j in range(3)])


@pytest.mark.parametrize("where", ["folder", "s3"])
def test_two_processes_writing_the_same_new_rows_at_once_store_one_copy_of_each(tmp_path, where, request,
                                                                                 monkeypatch):
    """Both jobs of one store finish the same videos at the same moment. LanceDB's merge, looking new
    keys up in the row_id index, let both commit them (CI: 6 segment captions where 4 were made)."""
    if where == "s3":
        for name, value in request.getfixturevalue("s3_server").items():
            if name != "client":
                monkeypatch.setenv(name, value)
    uri = str(tmp_path / "db") if where == "folder" else "s3://vidprep-test/race"
    store = Store(uri)
    store.mark_done([_done(f"earlier-{i}", 1) for i in range(50)])
    store.compact()  # the row_id index covers rows, as in a store that has run before
    start = time.time() + 3  # both processes started and their store open
    assert _in_two_processes(_mark_the_same_videos_done, lambda _: (uri, start, 30)) == [0, 0]
    row_ids = store.scan("stage_done", columns=["row_id"])["row_id"].to_pylist()
    assert len(row_ids) == len(set(row_ids)) == 50 + 30 * 3


def test_a_folder_without_file_locks_still_stores_one_copy_of_each_row(tmp_path, monkeypatch):
    """A bucket mounted by FUSE may refuse flock: the writes go on, with the merge that checks keys itself."""
    import errno
    import fcntl

    def refuse(*_):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", refuse)
    store = Store(str(tmp_path / "db"))
    for _ in range(2):
        store.mark_done([_done(f"v{i}", 1) for i in range(5)])
    store.compact()
    store.mark_done([_done(f"v{i}", 2) for i in range(3, 8)])
    rows = {r["video_id"]: r["rows"] for r in store.scan("stage_done", columns=["video_id", "rows"]).to_pylist()}
    assert rows == {"v0": 1, "v1": 1, "v2": 1, "v3": 2, "v4": 2, "v5": 2, "v6": 2, "v7": 2}
    assert store.table("stage_done").count_rows() == 8


def test_search_over_all_videos_leaves_out_videos_not_complete(tmp_path):
    rng = np.random.default_rng(3)
    store = Store(str(tmp_path / "db"))
    rows = _rows(60, 16, rng)
    store.upsert("frame_embeddings_16", rows)
    store.mark_done([_done("v0", 20), _done("v1", 20)])
    # v2 has rows but no completion marker (a run writing it, or killed after its rows).
    v2_row = next(r for r in rows if r["video_id"] == "v2")
    hits = store.search(np.array(v2_row["vector"]), "k", k=25)
    assert len(hits) == 25 and {h.video_id for h in hits} == {"v0", "v1"}
    assert store.search(np.array(v2_row["vector"]), "other-key", k=3) == []


def test_upsert_is_idempotent(tmp_path):
    store = Store(str(tmp_path / "db"))
    rows = _rows(10, 8, np.random.default_rng(1))
    store.upsert("frame_embeddings_8", rows)
    store.upsert("frame_embeddings_8", rows[5:])
    assert store.table("frame_embeddings_8").count_rows() == 10


def test_a_store_from_an_earlier_vidprep_gets_the_new_columns_and_keeps_its_rows(tmp_path):
    import lancedb
    import pyarrow as pa

    from vidprep.evaluation.scoring import report
    from vidprep.store.schema import PREDICTIONS

    old_schema = pa.schema([f for f in PREDICTIONS if f.name != "usage_json"])
    old_row = {f.name: None for f in old_schema} | {
        "row_id": "run/q1", "run_key": "run", "qid": "q1", "task": "mcq", "question_json": '{"answer": 0}',
        "prediction_json": "0", "valid": True, "visited": [], "llm_calls": 1, "prompt_tokens": 5,
        "completion_tokens": 2, "seconds": 1.0}
    lancedb.connect(str(tmp_path / "db")).create_table("predictions", pa.Table.from_pylist([old_row], old_schema))
    store = Store(str(tmp_path / "db"))
    store.record_prediction(old_row | {"qid": "q2", "usage_json": '{"m": {"calls": 1, "prompt_tokens": 5, '
                                                                  '"completion_tokens": 2}}'})
    rows = sorted(store.predictions(["run"]), key=lambda r: r["qid"])
    assert {tuple(i.columns) for i in store.table("predictions").list_indices()} == {("row_id",), ("video_id",),
                                                                                     ("run_key",)}
    assert [r["qid"] for r in rows] == ["q1", "q2"] and rows[0]["usage_json"] is None
    # The old row has no tokens per model: its run's money is unknown, and says why.
    costs = report(rows, {"m": {"input": 1.0, "output": 1.0}})["costs"]
    assert costs["usd_per_question"] is None and costs["unpriced_models"] == ["(not recorded)"]


def test_a_video_is_found_by_id_name_file_name_or_stem_through_the_indexes(tmp_path):
    from vidprep.jobs.search import resolve_video

    store = Store(str(tmp_path / "db"))
    store.upsert("videos", [{"row_id": v, "video_id": v, "name": name} for v, name in
                            (("id1", "walk"), ("id2", "run"), ("id3", "axb"), ("id4", "twin"), ("id5", "twin"))])
    store.record_sources([("/data/clips/walk.mp4", 1, 1, "id1", "probe", ""),
                          ("/data/other/run.final.mkv", 1, 1, "id2", "probe", ""),
                          ("/data/axb.mp4", 1, 1, "id3", "probe", "")])
    assert resolve_video(store, "all") is None
    assert resolve_video(store, "id2") == "id2"
    assert resolve_video(store, "walk") == resolve_video(store, "walk.mp4") == "id1"
    assert resolve_video(store, "run.final") == resolve_video(store, "run.final.mkv") == "id2"
    # "_" is a LIKE wildcard: it may widen the query, never the answer.
    with pytest.raises(ArtifactMissing, match="no video 'a_b'"):
        resolve_video(store, "a_b")
    with pytest.raises(ArtifactMissing, match="'twin' names 2 videos"):
        resolve_video(store, "twin")
    store.compact()
    assert "ScalarIndexQuery" in store.table("videos").search().where("name = 'walk'").explain_plan()


def test_rows_many_threads_write_at_once_share_commits_and_each_caller_sees_its_own_outcome(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from vidprep.store.store import GroupCommit

    store = Store(str(tmp_path / "db"))
    store.record_prediction({"run_key": "run", "qid": "first", "video_id": "v1", "valid": True})
    before = store.table("predictions").version
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(lambda i: store.record_prediction({"run_key": "run", "qid": f"q{i}", "video_id": "v1",
                                                         "valid": True}), range(64)))
    assert {r["qid"] for r in store.predictions(["run"])} == {"first"} | {f"q{i}" for i in range(64)}
    # Fewer commits than rows: the rows that arrived during a commit went together in the next.
    assert store.table("predictions").version - before < 64

    def refused(rows):
        raise ValueError(f"{len(rows)} rows refused")

    failing = GroupCommit(refused)
    with ThreadPoolExecutor(8) as pool:
        outcomes = [f.exception() for f in [pool.submit(failing, {"row": i}) for i in range(16)]]
    assert all(isinstance(e, ValueError) for e in outcomes)


def test_search_over_all_videos_of_an_indexed_table_ranks_videos_by_their_mean_then_their_frames_exactly(tmp_path):
    from vidprep.jobs.bench.vectors import video_like_vectors

    rng = np.random.default_rng(5)
    store = Store(str(tmp_path / "db"), ann_min_rows=1000)
    # One probe of the index: what it finds alone differs from the exact ranking (checked below).
    store.NEAREST_VIDEOS, store.ANN_PROBES = 4, 1
    videos = {f"v{v}": video_like_vectors(rng, 50, 32) for v in range(40)}

    def write(names):
        store.upsert("frame_embeddings_32", [
            {"row_id": f"{v}/k/{i}", "video_id": v, "stage_key": "k", "frame_index": i, "timestamp": float(i),
             "vector": vector.tolist(), "model": "random", "description": None}
            for v in names for i, vector in enumerate(videos[v])])
        store.mark_done([_done(v, 50) for v in names])

    write([f"v{v}" for v in range(39)])
    store.index_embeddings()
    assert store.table("video_vectors_32").count_rows() == 39

    def exact(query, among):
        scored = sorted(((float(vector @ query), v, i) for v in among for i, vector in enumerate(videos[v])), reverse=True)
        return {(v, float(i)) for _, v, i in scored[:10]}

    # Text-like queries: cosine about 0.3 to a frame, the rest a shared offset and noise (README, search).
    gap = rng.normal(size=32)
    queries = []
    for source in ("v3", "v17", "v30"):
        frame = videos[source][7]
        query = 0.3 * frame + 0.75 * gap / np.linalg.norm(gap) + 0.2 * rng.normal(size=32) / np.sqrt(32)
        queries.append((query / np.linalg.norm(query)).astype(np.float32))
    for query in queries:
        hits = store.search(query, "k", k=10)
        assert {(h.video_id, h.timestamp) for h in hits} == exact(query, [f"v{v}" for v in range(39)])
    alone = Store(str(tmp_path / "db"), ann_min_rows=1000)
    alone.ANN_PROBES, alone.NEAREST_VIDEOS = 1, 0
    assert any({(h.video_id, h.timestamp) for h in alone.search(q, "k", k=10)} != exact(q, [f"v{v}" for v in range(39)])
               for q in queries)
    # A video completed since the vectors were added has none: the ANN index answers alone (its rows
    # scanned beside the index) until the store is compacted, as a run does every 100 videos and at its end.
    write(["v39"])
    assert store.search(videos["v39"][5], "k", k=1)[0].video_id == "v39"
    store.compact()
    assert store.table("video_vectors_32").count_rows() == 40
    assert store.search(videos["v39"][5], "k", k=1)[0].video_id == "v39"

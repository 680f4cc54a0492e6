"""`vidprep import-captions`: a store of videos known only by their published captions.

Each captioned video becomes a store video without a media file: its id is a hash of its dataset
name (there are no bytes to hash; the captions' content is in the frame_captions key), its duration
is where its last caption's span ends, and its source path is the path the dataset's questions
name, so `vidprep answer` finds it like any other. The captions-only plan then runs like precompute.
"""

import hashlib
import time
from pathlib import Path

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from vidprep.pipeline.plan import build_plan
from vidprep.pipeline.precompute import Summary, new_run_id, register_plan, run_stages
from vidprep.conf.checks import ConfigError
from vidprep.stages.imported import ImportedCaptions
from vidprep.store.settings import StoreSettings
from vidprep.store.keys import CAPTIONS_ONLY
from vidprep.store.store import utcnow


def named_video_id(name: str) -> str:
    return hashlib.blake2b(f"{CAPTIONS_ONLY}:{name}".encode(), digest_size=10).hexdigest()


def _question_paths(cfg: DictConfig) -> dict[str, str]:
    """Video name -> the path the dataset's questions give it, where the dataset has questions."""
    questions = cfg.dataset.get("questions")
    if questions is None or any(OmegaConf.is_missing(questions, k) for k in questions):
        return {}
    return {Path(q.video).stem: q.video for q in instantiate(cfg.dataset.questions, _convert_="all")}


def import_captions(cfg: DictConfig, clock: float | None = None, stop_ray: bool = False) -> Summary:
    started, clock = utcnow(), time.monotonic() if clock is None else clock
    plan = build_plan(cfg.stages)
    source = plan.stages.get("frame_captions")
    if plan.probe is not None or not isinstance(source, ImportedCaptions):
        raise ConfigError("import-captions needs a captions-only dataset (dataset=nextqa_dev, dataset=captions, "
                          "or stages=imported with dataset.captions set)")
    settings = StoreSettings.from_config(cfg.store)
    store = settings.open()
    register_plan(store, plan)
    paths = _question_paths(cfg)
    videos = [{"video_id": named_video_id(name), "row_id": named_video_id(name), "stage_key": CAPTIONS_ONLY,
               "name": name, "source_path": paths.get(name, name), "size": 0, "duration": source.duration(name),
               "fps": 1.0 / source.seconds_per_caption, "width": 0, "height": 0, "codec": CAPTIONS_ONLY,
               "has_audio": False} for name, items in sorted(source.captions.items()) if items]
    if not videos:
        raise ConfigError(f"no captions found in {source.path} (format {source.format})")
    store.upsert("videos", videos)
    # Size and mtime -1 match no real file: once the video itself is at that path, precompute
    # identifies it by its bytes and the path points at the real video from then on.
    store.record_sources([(v["source_path"], -1, -1, v["video_id"], CAPTIONS_ONLY, "") for v in videos])
    records = [v | {"entry_path": v["source_path"], "failed_stage": "", "error": ""} for v in videos]
    return run_stages(cfg, plan, settings, records, new_run_id(), started, clock, stop_ray=stop_ray)

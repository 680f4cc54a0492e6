"""A torch model stage on CUDA against the CPU (skipped where torch sees no CUDA device)."""

import json
from pathlib import Path

import numpy as np

from vidprep.jobs.bench.figures import BenchRun, Figure, _timed, big_buck_bunny, looped
from vidprep.jobs.config import load_config
from vidprep.pipeline.plan import build_plan
from vidprep.stages.probe import ProbeVideo
from vidprep.store.artifacts import FRAMES


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


def figures(run: BenchRun) -> list[Figure]:
    import torch

    if torch.cuda.is_available():
        return device_figures(run.work)
    print("gpu: skipped, torch sees no CUDA device here", flush=True)
    return []

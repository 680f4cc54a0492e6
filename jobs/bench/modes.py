"""The search modes against each other on the sample's scenes."""

import json
from pathlib import Path

from vidprep.jobs.bench.figures import BenchRun, Figure
from vidprep.store.artifacts import FRAME_EMBEDDINGS
from vidprep.store.store import Store


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
    embedder, key = plan.stages[FRAME_EMBEDDINGS.stage].embedder, plan.keys[FRAME_EMBEDDINGS.stage]

    def found(mode: str) -> int:
        hits = [store.search(embedder.embed_texts([text])[0], key, video_id, k=1, text=text, mode=mode)
                for video_id, text, _, _ in asked]
        return sum(bool(h) and start <= h[0].timestamp < end for h, (_, _, start, end) in zip(hits, asked))

    vector = found("vector")
    return [Figure(f"search.mode={mode}: top frame in the asked scene, {len(asked)} sample queries",
                   "search.mode=vector (found)", vector, found(mode), "found") for mode in ("text", "hybrid")]


def figures(run: BenchRun) -> list[Figure]:
    _, _, store, plan = run.precomputed()
    return search_mode_figures(plan, store, run.sample)

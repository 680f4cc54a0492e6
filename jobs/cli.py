"""The `vidprep` command: `vidprep COMMAND [args] [Hydra overrides]`."""

import importlib
import os
import sys

COMMANDS = {
    "precompute": ("vidprep.jobs.precompute", "precompute a dataset's artifacts into the store (Hydra job)"),
    "import-captions": ("vidprep.jobs.import_captions", "[--format F PATH]: published captions as a captions-only store"),
    "answer": ("vidprep.jobs.answer", "answer a dataset's questions with a method (Hydra job)"),
    "evaluate": ("vidprep.jobs.evaluate", "[run=KEY]: scores of the answer runs in the store"),
    "report": ("vidprep.jobs.report", "[RUN ...] [--serve]: a static HTML report of answer runs"),
    "search": ("vidprep.jobs.search", 'VIDEO_OR_ALL "text": top frames for a text query'),
    "sample": ("vidprep.jobs.sample", "[FOLDER]: write the built-in sample videos"),
    "bench": ("vidprep.jobs.bench", "measure what the cache saves (ratios against same-run baselines)"),
    "serve-llm": ("vidprep.jobs.serve_llm", "run the embedded llama.cpp server with the shipped SmolLM2"),
    "show": ("vidprep.jobs.show", "VIDEO_ID_OR_PATH: print a video's artifacts"),
}


def quoted_for_hydra(argument: str) -> str:
    """`key=value` with the value in double quotes where Hydra's override grammar would refuse it bare
    (spaces, non-ASCII letters: a folder named "My Videos" or "Видео"); anything else unchanged."""
    key, sep, value = argument.partition("=")
    if not sep or key.startswith("-") or not value or value[0] in "'\"[{" or '"' in value or "${" in value:
        return argument
    if value.isascii() and not any(ch.isspace() for ch in value):
        return argument
    return f'{key}="{value}"'


def main() -> None:
    # The shipped models load from installed files; never let a hub lookup stall an offline machine.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    # A model load is not progress the user waits on; its bars would bury a one-line error.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        print("usage: vidprep COMMAND [args] [overrides]\n")
        for name, (_, help_text) in COMMANDS.items():
            print(f"  {name:<16} {help_text}")
        sys.exit(0 if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help") else 2)
    name = sys.argv.pop(1)
    sys.argv = [f"vidprep {name}"] + [quoted_for_hydra(a) for a in sys.argv[1:]]
    from vidprep.jobs import errors

    with errors.user_errors():
        importlib.import_module(COMMANDS[name][0]).main()
    if errors.jobs_with_failures:
        sys.exit(errors.EXIT_FAILURES)


if __name__ == "__main__":
    main()

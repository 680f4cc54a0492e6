# PYTHON_ARGCOMPLETE_OK
"""vidprep: precompute a video once, reason about it many times.

One parser with a subcommand per module of `vidprep.jobs`: the module's docstring is the command's
help, its `add_arguments(parser)` declares the options and `run(args)` does the work. Arguments of
the form key=value (and +key=value, ~key) are Hydra overrides of the config in `vidprep/conf`.
"""

import argparse
import atexit
import importlib
import os
import sys

from vidprep.jobs import errors
from vidprep.jobs.watchdog import watch_this_command

# Command -> (module of vidprep.jobs, one line for `vidprep --help`).
COMMANDS = {
    "precompute": ("precompute", "precompute the configured stages of a dataset into the store (Hydra job)"),
    "import-captions": ("import_captions", "published captions as a captions-only store"),
    "answer": ("answer", "answer a dataset's questions with a method (Hydra job)"),
    "evaluate": ("evaluate", "scores of the answer runs in the store"),
    "export": ("export", "an answer run's files for a benchmark's own tools"),
    "critic-examples": ("critic_examples", "CAViAR critic examples from a held-out run's real traces"),
    "report": ("report", "a static HTML report of answer runs"),
    "search": ("search", "top frames for a text query"),
    "show": ("show", "print a video's artifacts"),
    "sample": ("sample", "write the built-in sample videos"),
    "bench": ("bench", "measure what the cache saves (ratios against same-run baselines)"),
    "serve-llm": ("serve_llm", "run the embedded llama.cpp server with the shipped SmolLM2"),
}


def parser(command: str | None) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser | None]:
    """The whole command line; only the named command's module is imported (help and completion stay fast)."""
    top = argparse.ArgumentParser(prog="vidprep", description=__doc__.split("\n\n")[0])
    top.add_argument("-v", "--verbose", action="store_true",
                     help="show Ray's own logs and progress bars (otherwise in DATA_DIR/logs/ray.log)")
    commands = top.add_subparsers(dest="command", metavar="COMMAND", required=True)
    chosen = None
    for name, (module_name, summary) in COMMANDS.items():
        sub = commands.add_parser(name, help=summary, description=summary,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
        if name == command:
            module = importlib.import_module(f"vidprep.jobs.{module_name}")
            sub.description = module.__doc__
            module.add_arguments(sub)
            sub.set_defaults(handler=module.run)
            chosen = sub
    return top, chosen


def main() -> None:
    try:
        run_command()
        status = 0
    except SystemExit as done:
        status = done.code
    exit_at_once(status)


def exit_at_once(status) -> None:
    """Exit once the command is done. Python's own shutdown would then tear down every extension it
    loaded (0.7 s with LanceDB, Ray and torch), time the user waits after the summary's wall time; the
    exit handlers still run, and the output is flushed first."""
    if isinstance(status, str):
        print(status, file=sys.stderr)
        status = 1
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status or 0)


def run_command() -> None:
    # The shipped models load from installed files; never let a hub lookup stall an offline machine.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    # A model load is not progress the user waits on; its bars would bury a one-line error.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    # Hydra raises what composing a job's config raised instead of printing it, so a bad override reaches
    # `errors.user_errors` and is one line, exit 2, like any other command's mistake.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    # `vidprep -v COMMAND`: Ray's own logs and progress bars in the terminal (config ray.verbose).
    if sys.argv[1:2] in (["-v"], ["--verbose"]):
        del sys.argv[1]
        os.environ["VIDPREP_VERBOSE"] = "true"
    completing = "_ARGCOMPLETE" in os.environ
    words = os.environ.get("COMP_LINE", "").split()[1:] if completing else sys.argv[1:]
    command = words[0] if words and words[0] in COMMANDS else None
    top, chosen = parser(command)
    if completing:
        import argcomplete

        argcomplete.autocomplete(top)
    if chosen is None:
        top.parse_args()  # help (exit 0), or a missing or unknown command (exit 2)
    # Intermixed: options may stand between positionals and overrides (`search all "a cat" -k 2 store.uri=...`).
    args = chosen.parse_intermixed_args(sys.argv[2:])
    watch_this_command()
    with errors.user_errors():
        args.handler(args)
    if errors.jobs_with_failures:
        sys.exit(errors.EXIT_FAILURES)


if __name__ == "__main__":
    main()

"""vidprep report [--run KEY ...] [--out DIR] [--serve]: a static HTML report of answer runs (all in the
store by default), one folder that opens from disk; --serve also serves it on 127.0.0.1."""

import argparse
import functools
import http.server
from pathlib import Path

from vidprep.jobs.config import add_overrides, load_config
from vidprep.jobs.evaluate import method_defaults
from vidprep.stages.models.profiles import model_prices

# The work's modules are imported in `run`: `vidprep COMMAND --help` and completion stay fast.


def serve(folder: Path, port: int) -> None:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), handler) as server:
        print(f"serving {folder} on http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C stops)", flush=True)
        server.serve_forever()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", action="append", default=[], metavar="KEY",
                        help="an answer run's key (repeatable; default: every run in the store)")
    parser.add_argument("--out", help="report folder (default: DATA_DIR/report)")
    parser.add_argument("--serve", action="store_true", help="serve the report on 127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    add_overrides(parser)


def run(args: argparse.Namespace) -> None:
    from vidprep.evaluation.report import ReportWriter
    from vidprep.store.settings import StoreSettings

    cfg = load_config(args.overrides)
    out = Path(args.out or Path(cfg.data_dir) / "report")
    index = ReportWriter(StoreSettings.from_config(cfg.store).open_existing(), out, model_prices(cfg.prices), method_defaults()).write(
        args.run)
    print(f"report: {index}")
    if args.serve:
        serve(out, args.port)

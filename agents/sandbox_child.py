"""The sandbox process for generated code (run by agents/sandbox.py, never imported).

It first locks itself in: no network (a new, empty network namespace), no file system (chroot into
an empty folder), no processes and no privileges (the `nobody` user, RLIMIT_NPROC 0), bounded memory
and CPU time. Then it reads programs as JSON lines on stdin and runs each in a namespace that holds
only safe builtins, the allow-listed modules and stubs of the agent's modules; a stub call is sent
to the parent on stdout and its reply read back on stdin.
"""

import ast
import collections
import ctypes
import functools
import io
import itertools
import json
import math
import os
import re
import resource
import statistics
import sys

ALLOWED_IMPORTS = {"math": math, "re": re, "json": json, "statistics": statistics, "itertools": itertools,
                   "collections": collections, "functools": functools}
SAFE_BUILTINS = {name: getattr(__builtins__, name, None) if not isinstance(__builtins__, dict) else __builtins__[name]
                 for name in ("abs all any bool dict enumerate filter float int len list map max min print range "
                              "reversed round set sorted str sum tuple zip isinstance repr divmod pow chr ord "
                              "Exception ValueError TypeError KeyError IndexError ZeroDivisionError RuntimeError "
                              "True False None").split()}
CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000


def lock_down(root: str, memory_mb: int, cpu_s: int) -> list[str]:
    """Apply every isolation this machine allows; the list names those that took effect."""
    libc = ctypes.CDLL(None, use_errno=True)
    applied = []
    flags = CLONE_NEWNET if os.geteuid() == 0 else CLONE_NEWUSER | CLONE_NEWNET
    if libc.unshare(flags) == 0:
        applied.append("network")
    try:
        os.chroot(root)
        os.chdir("/")
        applied.append("filesystem")
    except OSError:
        pass
    if os.geteuid() == 0:
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
        applied.append("unprivileged")
    limits = [(resource.RLIMIT_AS, memory_mb << 20), (resource.RLIMIT_CPU, cpu_s), (resource.RLIMIT_NPROC, 0),
              (resource.RLIMIT_FSIZE, 0), (resource.RLIMIT_NOFILE, 8), (resource.RLIMIT_CORE, 0)]
    for limit, value in limits:
        resource.setrlimit(limit, (value, value))
    applied.append("limits")
    return applied


class Refused(Exception):
    pass


# Attributes that lead from an object to frames, and from frames to other modules' globals.
INTROSPECTION = {"gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame", "ag_code", "tb_frame", "tb_next",
                 "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "co_consts", "func_globals"}


def check(tree: ast.AST) -> None:
    """Refuse what no honest program needs: dunder, private and frame attributes, imports off the list."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and (node.attr.startswith("_") or node.attr in INTROSPECTION):
            raise Refused(f"access to attribute {node.attr!r} is not allowed")
        if isinstance(node, ast.Name) and node.id.startswith("__"):
            raise Refused(f"name {node.id!r} is not allowed")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                if name.split(".")[0] not in ALLOWED_IMPORTS:
                    raise Refused(f"import of {name!r} is not allowed")


def safe_import(name, globals=None, locals=None, fromlist=(), level=0):
    if level or name.split(".")[0] not in ALLOWED_IMPORTS:
        raise ImportError(f"import of {name!r} is not allowed")
    return ALLOWED_IMPORTS[name.split(".")[0]]


class Finished(Exception):
    def __init__(self, answer):
        self.answer = answer


class Output(io.StringIO):
    """Printed output, cut at a limit so a program cannot flood its parent."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit, self.cut = limit, False

    def write(self, text: str) -> int:
        room = self.limit - self.tell()
        if room <= 0:
            self.cut = True
            return len(text)
        if len(text) > room:
            self.cut = True
        return super().write(text[:room])


def main() -> None:
    channel_in, channel_out = sys.stdin, sys.__stdout__
    config = json.loads(channel_in.readline())
    applied = lock_down(config["root"], config["memory_mb"], config["cpu_s"])
    channel_out.write(json.dumps({"type": "ready", "isolation": applied}) + "\n")
    channel_out.flush()

    def call(name, *args, **kwargs):
        channel_out.write(json.dumps({"type": "call", "name": name, "args": args, "kwargs": kwargs}) + "\n")
        channel_out.flush()
        reply = json.loads(channel_in.readline())
        if reply["type"] == "error":
            raise RuntimeError(reply["message"])
        return reply["value"]

    def finish(answer):
        raise Finished(answer)

    namespace = {"__builtins__": dict(SAFE_BUILTINS, __import__=safe_import)}
    for name in config["modules"]:
        namespace[name] = finish if name == "finish" else functools.partial(call, name)
    for line in channel_in:
        request = json.loads(line)
        output = Output(config["output_limit"])
        sys.stdout = output
        result = {"type": "done", "finished": False, "answer": None, "error": "", "value": None}
        try:
            tree = ast.parse(request["code"], mode="exec")
            check(tree)
            last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
            exec(compile(tree, "<step>", "exec"), namespace)
            if last is not None:
                value = eval(compile(ast.Expression(last.value), "<step>", "eval"), namespace)
                result["value"] = repr(value)[: config["output_limit"]]
        except Finished as done:
            result.update(finished=True, answer=done.answer)
        except MemoryError:
            result["error"] = "MemoryError: the step ran out of its memory limit"
        except Exception as error:  # noqa: BLE001 - shown to the agent as the step's result
            result["error"] = f"{type(error).__name__}: {error}"
        finally:
            sys.stdout = sys.__stdout__
        result["output"] = output.getvalue() + ("\n[output cut at the limit]" if output.cut else "")
        try:
            text = json.dumps(result)
        except (TypeError, ValueError):
            text = json.dumps(dict(result, answer=repr(result["answer"]), error=result["error"]))
        channel_out.write(text + "\n")
        channel_out.flush()


if __name__ == "__main__":
    main()

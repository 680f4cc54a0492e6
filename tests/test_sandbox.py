"""The sandbox for CAViAR's generated programs: contained at the operating-system level."""

import pytest

from vidprep.agents.sandbox import Sandbox


@pytest.fixture(scope="module")
def sandbox():
    box = Sandbox({"add": lambda a, b: a + b, "finish": None}, time_limit_s=2, memory_mb=128)
    yield box
    box.close()


def test_isolation_is_at_the_os_level(sandbox):
    sandbox.run("1")
    assert {"network", "filesystem", "unprivileged", "limits"} <= set(sandbox.isolation)


def test_modules_are_reached_through_the_call_interface_and_state_persists(sandbox):
    first = sandbox.run("x = add(2, 3)\nprint('x is', x)\nx * 2")
    assert (first.output.strip(), first.value, first.error) == ("x is 5", "10", "")
    assert sandbox.run("x + 1").value == "6"
    done = sandbox.run("finish(x)")
    assert done.finished and done.answer == 5


@pytest.mark.parametrize("code,message", [
    ("import os", "import of 'os' is not allowed"),
    ("import subprocess", "import of 'subprocess' is not allowed"),
    ("import socket", "import of 'socket' is not allowed"),
    ("from ctypes import CDLL", "import of 'ctypes' is not allowed"),
    ("open('/etc/passwd').read()", "name 'open' is not defined"),
    ("__import__('os')", "name '__import__' is not allowed"),
    ("eval('1 + 1')", "name 'eval' is not defined"),
    ("().__class__.__base__.__subclasses__()", "attribute '__subclasses__' is not allowed"),
    ("add.__globals__", "attribute '__globals__' is not allowed"),
    ("add.__globals__['__builtins__']", "attribute '__globals__' is not allowed"),
    ("import sys\nsys.modules['os']", "import of 'sys' is not allowed"),
    ("exec('import os')", "name 'exec' is not defined"),
    ("compile('1', 'x', 'eval')", "name 'compile' is not defined"),
    ("getattr(add, '__glob' + 'als__')", "name 'getattr' is not defined"),
    ("g = (x for x in [1])\ng.gi_frame.f_back.f_globals", "attribute 'f_globals' is not allowed"),
    ("try:\n    1 / 0\nexcept Exception as e:\n    e.__traceback__.tb_frame", "attribute 'tb_frame' is not allowed"),
    ("def f():\n    yield 1\nf().gi_frame", "attribute 'gi_frame' is not allowed"),
    ("[c for c in ().__class__.__mro__]", "attribute '__mro__' is not allowed"),
    ("add(1)", "add: TypeError"),
    ("add('a', 1)", "add: TypeError"),
])
def test_escapes_are_refused_and_the_sandbox_goes_on(sandbox, code, message):
    result = sandbox.run(code)
    assert message in result.error and not result.finished
    assert sandbox.run("add(1, 1)").value == "2"


def test_os_lock_down_holds_without_the_python_filter(tmp_path):
    """Code that got past the Python-level filter still finds no network, files or processes."""
    import socket
    import subprocess
    import sys

    from vidprep.agents import sandbox_child

    secret = tmp_path / "secret.txt"
    secret.write_text("do not read")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    root = tmp_path / "root"
    root.mkdir()
    attempts = f"""
import os, socket, sys
sys.path.insert(0, {str(sandbox_child.__file__.rsplit('/', 1)[0])!r})
import sandbox_child
print(sorted(sandbox_child.lock_down({str(root)!r}, 128, 5)))
for name, attempt in [
    ("file", lambda: open({str(secret)!r}).read()),
    ("write", lambda: open("/x", "w").write("x")),
    ("socket", lambda: socket.socket().connect(("127.0.0.1", {port}))),
    ("fork", lambda: os.fork()),
    ("exec", lambda: os.execv("/bin/sh", ["sh", "-c", "echo escaped"])),
]:
    try:
        attempt()
        print(name, "ALLOWED")
    except OSError as error:
        print(name, "blocked", type(error).__name__)
"""
    done = subprocess.run([sys.executable, "-c", attempts], capture_output=True, text=True, timeout=30)
    listener.close()
    lines = done.stdout.splitlines()
    assert lines[0] == "['filesystem', 'limits', 'network', 'unprivileged']", done.stderr
    assert all(line.split()[1] == "blocked" for line in lines[1:]) and len(lines) == 6, done.stdout


def test_infinite_loop_is_stopped_and_the_next_step_runs():
    box = Sandbox({"finish": None}, time_limit_s=1)
    try:
        result = box.run("while True:\n    pass")
        assert "TimeoutError" in result.error and "variables were reset" in result.error
        assert box.run("1 + 1").value == "2"
    finally:
        box.close()


def test_memory_bomb_and_output_flood_are_bounded():
    box = Sandbox({"finish": None}, time_limit_s=5, memory_mb=128, output_limit=1000)
    try:
        assert "MemoryError" in box.run("x = 'a' * (10 ** 9)").error
        flood = box.run("for i in range(10 ** 6):\n    print('y' * 100)")
        assert len(flood.output) < 1100 and "output cut at the limit" in flood.output
        # 1 GB printed in 1 MB lines: cut at the limit, the step ends within its time.
        gigabyte = box.run("for i in range(1000):\n    print('z' * 10 ** 6)")
        assert len(gigabyte.output) < 1100 and "output cut at the limit" in gigabyte.output
        assert box.run("1 + 1").value == "2"
    finally:
        box.close()

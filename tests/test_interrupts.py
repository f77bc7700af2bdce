"""A Ctrl-C or SIGTERM at any moment of a prep process ends it with one line and 130 or
143: never a traceback, never death by the signal (issue 43, item 15).

Timing cannot reach the windows that matter on demand (a loaded machine moves them), so
the signals are sent by the process itself at named points: a ``sitecustomize`` module
put on the child's path only (the test process and prep's code are untouched) fires them
when a module is first imported, when stderr is written a given text, or from an
``atexit`` handler. It sends them as dataclasses and numba meet them: inside code that
``exec`` runs, which makes CPython end a ``python -m`` process by SIGINT after it has
finalized, whatever its exit code."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from conftest import LIGHT_SAMPLE_CONFIG, REPO

from pipeline.util.processes import start_uninterrupted

RESUME = "finished units are kept; run the same command again to resume"

HOOK = textwrap.dedent(
    '''
    """Signals a prep process sends itself at named points (tests/test_interrupts.py)."""
    import atexit
    import io
    import os
    import signal
    import sys
    import weakref


    def fire(signals, in_exec=True):
        """Send ``signals`` to this process together, delivered inside exec'd code."""
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
        for signum in signals:
            os.kill(os.getpid(), signum)
        if in_exec:
            exec("import signal; signal.pthread_sigmask(signal.SIG_SETMASK, mask)", {"mask": mask})
        else:  # an exec would reset the flag an earlier KeyboardInterrupt set
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)


    class AtImport:
        def __init__(self, module, action):
            self.module, self.action = module, action

        def find_spec(self, name, path=None, target=None):
            if name == self.module:
                sys.meta_path.remove(self)
                self.action()


    class AtWrite(io.TextIOWrapper):
        text, signals = "", ()

        def write(self, s):
            written = super().write(s)
            if self.signals and self.text in s:
                self.flush()
                signals, self.signals = self.signals, ()
                fire(signals)
            return written


    def in_callback(signals):
        """Fire ``signals`` in a weakref's callback, which C calls: it cannot raise."""
        kept = [type("Object", (), {})()]
        ref = weakref.ref(kept[0], lambda gone: fire(signals))
        kept.clear()  # the callback runs now
        del ref


    def arm(point, signals):
        where, _, what = point.partition(":")
        if where == "import":
            sys.meta_path.insert(0, AtImport(what, lambda: fire(signals)))
        elif where == "write":
            stderr = AtWrite(sys.stderr.buffer, encoding="utf-8", errors="backslashreplace", line_buffering=True)
            stderr.text, stderr.signals = what, signals
            sys.stderr = stderr
        elif where == "callback":
            sys.meta_path.insert(0, AtImport(what, lambda: in_callback(signals)))
        elif where == "exit":
            atexit.register(fire, signals, False)  # the first registered, so the last to run


    if os.getppid() == int(os.environ["HOOK_PARENT"]):  # prep itself, not its fork server or workers
        for point in os.environ["HOOK_AT"].split(";"):
            at, _, names = point.partition("=")
            arm(at, [int(signal.Signals[name]) for name in names.split("+")])
    '''
)


def prep_signalled(tmp_path: Path, at: str, *args: str) -> subprocess.CompletedProcess:
    """``python -m pipeline ARGS``, signalled at ``at``: ``POINT=SIGNALS;...``, POINT one of
    ``import:MODULE``, ``callback:MODULE`` (in a weakref callback as MODULE is imported),
    ``write:TEXT`` (on stderr), ``exit``; SIGNALS like ``SIGINT+SIGTERM``."""
    hook = tmp_path / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(HOOK)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(hook), str(REPO), os.environ.get("PYTHONPATH", "")]),
        "HOOK_PARENT": str(os.getpid()),
        "HOOK_AT": at,
    }
    env.pop("PREP_DEBUG", None)
    command = [sys.executable, "-m", "pipeline", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)


def run_args(tmp_path: Path) -> list[str]:
    return ["run", str(LIGHT_SAMPLE_CONFIG), "--out", str(tmp_path / "out"), "-q", "-w", "2"]


def assert_ends_with(result: subprocess.CompletedProcess, code: int, line: str) -> None:
    """Exit status ``code`` (not death by a signal), and ``line`` the only line on stderr."""
    assert result.returncode == code, result.stderr
    assert [text for text in result.stderr.splitlines() if text.strip()] == [line], result.stderr


@pytest.mark.parametrize(
    "at, code, line",
    [
        # While click and the commands import, before any command: nothing to clean up.
        ("import:click=SIGINT", 130, "interrupted"),
        ("import:click=SIGTERM", 143, "terminated"),
        # In the command, as it imports the engine (the -2 of issue 43: a dataclass's exec).
        ("import:pipeline.engine.run=SIGINT", 130, f"interrupted: {RESUME}"),
        ("import:pipeline.engine.run=SIGTERM", 143, f"terminated: {RESUME}"),
        # Where Python cannot raise it: it printed "Exception ignored" and the run went on.
        ("callback:pipeline.engine.run=SIGINT", 130, f"interrupted: {RESUME}"),
        # Two at once: the first decides, the second lands in the clean-up the first started.
        ("import:pipeline.engine.run=SIGINT+SIGTERM", 130, f"interrupted: {RESUME}"),
        # Once the line is printed, in the process's last moments: the decided status stands.
        ("import:pipeline.engine.run=SIGTERM;write:terminated=SIGINT", 143, f"terminated: {RESUME}"),
        ("import:pipeline.engine.run=SIGINT;exit=SIGINT+SIGTERM", 130, f"interrupted: {RESUME}"),
    ],
)
def test_a_signal_at_any_point_of_a_run_ends_it_with_one_line_and_its_status(tmp_path, at, code, line):
    assert_ends_with(prep_signalled(tmp_path, at, *run_args(tmp_path)), code, line)


def test_a_signal_after_the_run_finished_leaves_its_exit_code(tmp_path):
    result = prep_signalled(tmp_path, "exit=SIGINT", *run_args(tmp_path))
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert (tmp_path / "out" / "manifest.json").is_file()


def test_a_ctrl_c_while_click_reads_the_command_line_is_not_aborted(tmp_path):
    """``--help`` imports every command while click parses: click's own handler printed
    "Aborted!" and exited 1."""
    assert_ends_with(prep_signalled(tmp_path, "import:pipeline.commands.mix=SIGINT", "--help"), 130, "interrupted")


def test_a_ctrl_c_while_workers_start_is_delivered_once_they_have():
    """Ignored while processes start (so that they start ignoring it), it was lost: the
    run went on as if no key had been pressed. A SIGTERM with it is held as well."""
    events = []

    def start() -> None:
        for signum in (signal.SIGINT, signal.SIGTERM):  # as a terminal's, to the one thread prep has then
            signal.pthread_kill(threading.main_thread().ident, signum)
        events.append("started")

    previous = {signum: signal.signal(signum, lambda n, frame: events.append(n)) for signum in (2, 15)}
    try:
        start_uninterrupted(start)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    assert events[0] == "started" and sorted(events[1:]) == [signal.SIGINT, signal.SIGTERM]
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # the block is lifted

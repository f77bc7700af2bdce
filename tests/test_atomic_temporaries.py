"""Temporaries a killed writer left (``pipeline.util.atomic``), on a folder that several
machines share: only the writer's own machine can tell whether its pid still runs, so
another machine's temporary is left to its writer, and removed only when long stale."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import REPO

from pipeline.util.atomic import FOREIGN_STALE_SECONDS, HOST_CHARS, remove_dead_temporaries, temp_path, writer_tag

# A writer that dies inside ``atomic_path`` (as under SIGKILL: no clean-up runs), on the
# host named by argv[2] ("" for this one).
KILLED_WRITER = """
import os, socket, sys
if sys.argv[2]:
    socket.gethostname = lambda: sys.argv[2]
from pipeline.util.atomic import atomic_path
with atomic_path(sys.argv[1]) as tmp:
    tmp.write_bytes(b"half a model")
    os._exit(0)
"""


def _killed_writer(final: Path, host: str = "") -> Path:
    """Run a writer killed before its rename; return the temporary it left."""
    subprocess.run([sys.executable, "-c", KILLED_WRITER, str(final), host], cwd=REPO, check=True)
    (left,) = [p for p in final.parent.iterdir() if p.name.endswith(".tmp")]
    return left


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    return child.pid


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_a_killed_writer_of_this_host_leaves_nothing_for_long(tmp_path):
    left = _killed_writer(tmp_path / "m.bin")
    assert left.name.split(".")[3].endswith("@" + writer_tag().split("@")[1])
    remove_dead_temporaries([tmp_path / "m.bin"])
    assert not left.exists()


def test_a_temporary_of_another_host_is_not_judged_by_this_hosts_pids(tmp_path):
    """Its pid runs no process here, but its writer may be alive on its own machine."""
    left = _killed_writer(tmp_path / "m.bin", host="node-7.cluster")
    assert "@node-7-cluster." in left.name  # the host names its writer, dots made a name's letters
    remove_dead_temporaries([tmp_path / "m.bin"])
    assert left.exists()
    _age(left, FOREIGN_STALE_SECONDS - 3600)
    remove_dead_temporaries([tmp_path / "m.bin"])
    assert left.exists()
    _age(left, FOREIGN_STALE_SECONDS + 3600)  # not written to for a month: a dead node's
    remove_dead_temporaries([tmp_path / "m.bin"])
    assert not left.exists()


def test_an_older_preps_temporary_names_no_host_and_goes_only_when_stale(tmp_path):
    old = tmp_path / f".m.bin.{_dead_pid()}.abc123.tmp"  # what prep wrote before hosts were named
    old.write_bytes(b"x")
    remove_dead_temporaries([tmp_path / "m.bin"])
    assert old.exists()
    _age(old, FOREIGN_STALE_SECONDS + 3600)
    remove_dead_temporaries([tmp_path / "m.bin"])
    assert not old.exists()


def test_live_writers_and_other_files_are_kept(tmp_path):
    live = temp_path(tmp_path / "m.bin")  # this process: running
    other_final = tmp_path / f".m.bin.json.{_dead_pid()}@x.tmp"  # another file's temporary
    no_pid = tmp_path / ".m.bin.spill.tmp"
    for path in (live, other_final, no_pid):
        path.write_bytes(b"x")
        _age(path, FOREIGN_STALE_SECONDS + 3600)
    remove_dead_temporaries([tmp_path / "m.bin"])
    assert live.exists() and other_final.exists() and no_pid.exists()


def test_a_long_host_name_is_cut_and_told_apart(tmp_path):
    names = set()
    for host in ("a-very-long-cluster-node-name-0001.example.org", "a-very-long-cluster-node-name-0002.example.org"):
        names.add(_killed_writer(tmp_path / host[-20:] / "m.bin", host=host).name.split(".")[3].split("@")[1])
    assert len(names) == 2 and all(len(n) <= HOST_CHARS for n in names)

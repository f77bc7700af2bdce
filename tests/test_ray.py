"""--executor ray: the same bytes as the local executor, and a worker killed mid-run is
retried to the same result. Runs on a local Ray cluster the test starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import LIGHT_SAMPLE_CONFIG
from test_run import _big_config, tree_digest

pytest.importorskip("ray")
pytestmark = pytest.mark.ray


def prep_run(config, out, *extra) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "pipeline", "run", str(config), "--out", str(out), "-q", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def ray_task_pids() -> list[int]:
    """Ray names a worker process after the task it is running."""
    listing = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    return [int(line.split()[0]) for line in listing.splitlines() if "ray::_run_task" in line]


def test_ray_output_is_byte_identical_to_local(tmp_path):
    local, ray_out = tmp_path / "local", tmp_path / "ray"
    assert prep_run(LIGHT_SAMPLE_CONFIG, local, "-w", "2").wait() == 0
    proc = prep_run(LIGHT_SAMPLE_CONFIG, ray_out, "--executor", "ray", "-w", "2")
    assert proc.wait(timeout=300) == 0, proc.stderr.read()
    assert tree_digest(local) == tree_digest(ray_out)


def test_killed_worker_is_retried_to_the_same_bytes(shared_data, tmp_path):
    config = _big_config(tmp_path, shared_data)
    local = tmp_path / "local"
    assert prep_run(config, local, "-w", "2").wait() == 0
    out = tmp_path / "ray"
    proc = prep_run(config, out, "--executor", "ray", "-w", "2")
    killed = None
    deadline = time.monotonic() + 240
    while killed is None and time.monotonic() < deadline and proc.poll() is None:
        pids = ray_task_pids()
        if pids:
            time.sleep(0.3)  # let it get into the unit's work
            killed = pids[0]
            os.kill(killed, signal.SIGKILL)
        time.sleep(0.05)
    assert killed is not None, "never saw a Ray task running"
    assert proc.wait(timeout=300) == 0, proc.stderr.read()
    assert tree_digest(local) == tree_digest(out)


def test_a_task_starts_after_the_tasks_it_waits_for(tmp_path):
    """Task 1 waits for task 0, which runs until task 2 has run: Ray must hold task 1
    back (it fails if task 0's file is missing) and must not hold task 2 back."""
    import ray
    from test_warmup import _await, _touch

    from pipeline.engine.progress import ProgressBar
    from pipeline.engine.ray_executor import RayExecutor

    a, c, d = (str(tmp_path / name) for name in "acd")
    tests = os.path.dirname(__file__)  # where Ray's workers find the tasks' module
    ray.init(num_cpus=3, include_dashboard=False, runtime_env={"env_vars": {"PYTHONPATH": tests}})
    executor = RayExecutor(None, 3)
    try:
        tasks = [(_await, (a, d)), (_touch, (c, a)), (_touch, (d,))]
        assert executor.run(tasks, ProgressBar("t", 0, 3, mode="none"), after=[[], [0], []]) == [a, c, d]
    finally:
        executor.close()
        executor.ray.shutdown()

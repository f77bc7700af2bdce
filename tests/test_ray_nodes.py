"""Several machines, one of which dies.

Fast: each task of a run in its own machine's mirror, as on a cluster, gives the bytes of
a run on one machine (no Ray: what only several mirrors show); and the Ray executor runs
a task whose worker died again, and counts it.

Slow (``ray`` and ``slow``): configs/c4.toml's chain on a 3-node cluster on this host
(``ray.cluster_utils.Cluster``: a head, where the driver connects and no task runs, and
two worker nodes of one CPU each, each with its own scratch folder, as separate machines
have), inputs and --out on the S3
test server. A worker node (its raylet and its workers, SIGKILL) is killed in the middle
of each phase, and the driver is killed and the command run again: every run ends with
the bytes of ``--executor local``, and a node's death is reported as the tasks it cost.

The bytes compared are ``tree_digest``'s: every file but the timings (``cost.json``,
``stats/cost/``), which differ from run to run. The count of tasks run again lives in
``cost.json`` for that reason: it is a fact of this run, not of its output.

A kill lands in a phase by what the test sees, not by timing: a task process of the node
is stopped (SIGSTOP), then, while it cannot finish, the test checks that the phase has
begun (its progress line) and not ended (fewer markers in the store than its tasks).
Phases run one after another, so the stopped task is one of that phase's, and it has
not answered (its process title names the task until it has): the node dies with it.
Every task runs on a worker node, so a phase of one task (a small graph's component
step) is killed as surely as one of many.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow.fs as pafs
import pytest
from conftest import REPO, SAMPLE, SHARED_DATA, write_config
from test_run import tree_digest
from test_s3 import dedup_config

from pipeline.engine import global_run
from pipeline.engine import run as run_module
from pipeline.engine.run import run_pipeline

BUCKET = "nodes"
# A slice of the shared web corpus: five files, so every per-unit phase has more tasks
# than the cluster has CPUs; 793 documents, of which dedup finds duplicates.
WEB_FILES = (
    "dolma_ccmain_20190717_00140.jsonl.gz",
    "nltk_webtext.jsonl.gz",
    "datajuicer_redpajama_pile_samples.jsonl.gz",
    "dolma_cc_en_head_and_provided.jsonl.gz",
    "olmo_paloma_c4_100_domains_guardian_val.jsonl.gz",
)
# Each phase a node dies in (its progress label) and the keys of its markers under the run:
# c4.toml's dedup opens segment 1, paragraph_dedup segment 2 (with tokenize). A finalize
# round's markers are numbered by round, first "units" (how many component steps come
# before "members" depends on the data): ``marker_prefix`` counts them from the progress.
PHASES = {
    "read + stages": "stats/segment-0/",
    "dedup: map": "stats/global-1-map/",
    "dedup: reduce": "stats/global-1/reduce-",
    "dedup: components step 0": "stats/global-1/finalize-{round}-",  # a task per node range
    "dedup: members": "stats/global-1/finalize-{round}-",  # a finalize round of a task per partition
    "stages after paragraph_dedup": "stats/segment-2/",  # tokenize
}
FIRST_FINALIZE_ROUND = "dedup: units"
TASK_TITLE = "ray::_run_task"  # a Ray worker's process title while it runs one of prep's tasks


@pytest.fixture(scope="module")
def config(s3, tmp_path_factory) -> Path:
    """configs/c4.toml, reading the slice from the S3 test server."""
    if SHARED_DATA is None:
        pytest.skip("../shared/data is not present")
    s3.create_dir(BUCKET)
    for name in WEB_FILES:
        pafs.copy_files(str(SHARED_DATA / "web" / name), f"{BUCKET}/in/{name}", destination_filesystem=s3)
    text, replaced = re.subn(
        r"(?m)^paths = .*$", f'paths = ["s3://{BUCKET}/in/*.jsonl.gz"]', (REPO / "configs" / "c4.toml").read_text()
    )
    assert replaced == 1, "configs/c4.toml should have one source"
    # A unit per file: packed, the small files made one or two tasks of a phase, and the
    # node to kill ran none of them.
    text = text.replace("[run]\n", "[run]\ngroup_bytes = 0\n", 1)
    path = tmp_path_factory.mktemp("config") / "c4.toml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def local_run(s3, config, tmp_path_factory) -> dict[str, str]:
    """tree_digest of the same run with --executor local (--out on the store too)."""
    result = subprocess.run(command(config, "local") + ["-w", "2", "-q"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return stored_digest(s3, f"{BUCKET}/local", tmp_path_factory.mktemp("local"))


def test_tasks_in_other_machines_mirrors_give_the_bytes_of_one_machine(s3, tmp_path, monkeypatch):
    """Every task of a run over S3 in the mirror of one of three machines in turn, the driver
    in a fourth: what a machine holds that the store does not (a forest's slice, a folder
    the driver dropped) must not change a byte."""
    s3.create_dir("machines")
    pafs.copy_files(str(SAMPLE), "machines/in", destination_filesystem=s3)
    config = dedup_config(tmp_path / "remote.toml", "s3://machines/in")
    monkeypatch.setenv("PREP_SCRATCH", str(tmp_path / "one-machine"))
    run_pipeline(config, "s3://machines/one", workers=1, quiet=True)
    monkeypatch.setenv("PREP_SCRATCH", str(tmp_path / "driver"))
    turn = itertools.count()

    def elsewhere(task):
        def on_the_next_machine(*args, **kwargs):
            with monkeypatch.context() as machine:
                machine.setenv("PREP_SCRATCH", str(tmp_path / f"machine-{next(turn) % 3}"))
                return task(*args, **kwargs)

        return on_the_next_machine

    for module, name in ((global_run, "map_task"), (global_run, "reduce_task"), (global_run, "finalize_task")):
        monkeypatch.setattr(module, name, elsewhere(getattr(module, name)))
    monkeypatch.setattr(run_module, "segment_task", elsewhere(run_module.segment_task))
    run_pipeline(config, "s3://machines/many", workers=1, quiet=True)  # tasks in this process
    one, many = (stored_digest(s3, f"machines/{run}", tmp_path / run) for run in ("one", "many"))
    assert one == many


def test_the_summary_says_what_was_retried_and_a_run_without_retries_says_nothing(tmp_path):
    import io

    from pipeline.engine.summary import print_summary

    config = write_config(tmp_path / "c.toml", f'[sources.math]\npaths = ["{SAMPLE}/math/gsm8k.jsonl.gz"]\n')
    manifest = run_pipeline(config, tmp_path / "out", workers=1, quiet=True)
    cost = json.loads((tmp_path / "out" / "cost.json").read_text())
    assert cost["task_retries"] == {}  # the local executor never retries: a dead worker ends the run

    def summary() -> str:
        stream = io.StringIO()
        print_summary(manifest, tmp_path / "out", stream)
        return stream.getvalue()

    assert "retried" not in summary()
    cost["task_retries"] = {"read + stages": 2, "dedup: reduce": 1}
    (tmp_path / "out" / "cost.json").write_text(json.dumps(cost))
    retried = "  retried: read + stages 2, dedup: reduce 1 (tasks lost with their worker or node, run again)\n"
    assert retried in summary()


def _lost_the_first_times(folder: str, name: str, losses: int, progress=None) -> str:
    """Kills its own worker process the first ``losses`` times it runs (as a lost node
    would take it), then answers; each run leaves a byte in ``folder/name``."""
    runs = Path(folder) / name
    with runs.open("a") as f:
        f.write("x")
    if runs.stat().st_size <= losses:
        os.kill(os.getpid(), signal.SIGKILL)
    return name


@pytest.mark.ray
def test_a_lost_task_is_run_again_and_counted_by_phase(tmp_path):
    ray = pytest.importorskip("ray")
    from pipeline.engine.progress import ProgressBar
    from pipeline.engine.ray_executor import RETRIES, RayExecutor

    tests = os.path.dirname(__file__)  # where Ray's workers find the tasks' module
    ray.init(num_cpus=2, include_dashboard=False, runtime_env={"env_vars": {"PYTHONPATH": tests}})
    executor = RayExecutor(None, 2)
    try:
        tasks = [(_lost_the_first_times, (str(tmp_path), name, losses)) for name, losses in zip("abc", (1, 0, 2))]
        bar = ProgressBar("phase", 0, 3, mode="none")
        assert executor.run(tasks, bar, after=[[], [], [0]]) == ["a", "b", "c"]  # c starts once a answered
        runs = [(tmp_path / name).stat().st_size for name in "abc"]
        assert runs[0] >= 2 and runs[1] >= 1 and runs[2] >= 3  # each deliberate loss was run again
        # A dying worker can take a neighbour's lease with it (Ray: "the leased worker has
        # unrecoverable failure"), so one more loss than planned is possible; every loss is counted.
        assert executor.retried["phase"] >= sum(runs) - 3 >= 3
        with pytest.raises(ray.exceptions.WorkerCrashedError):  # lost every time: the run ends
            executor.run([(_lost_the_first_times, (str(tmp_path), "d", RETRIES + 1))], bar)
        # RETRIES + 1 runs were submitted; one may have died with a neighbour's lease before it
        # began (see above), so it left no byte. Never more runs than that bound.
        assert 1 <= (tmp_path / "d").stat().st_size <= RETRIES + 1
        assert executor.retried["phase"] >= sum(runs) - 3 + RETRIES
    finally:
        executor.close()
        ray.shutdown()


class Nodes:
    """The cluster: a head node, where the driver connects, and worker nodes to kill."""

    def __init__(self, scratch: Path):
        pytest.importorskip("ray")
        from ray.cluster_utils import Cluster

        self.scratch = scratch
        # The head runs no task (no CPU to lease): what it ran could not be killed without the cluster.
        self.cluster = Cluster(initialize_head=True, head_node_args={**self._node_args("head"), "num_cpus": 0})
        self.added = 0
        self.workers: list = []
        for _ in range(2):
            self.add()

    def _node_args(self, name: str) -> dict:
        return {"num_cpus": 1, "include_dashboard": False, "env_vars": {"PREP_SCRATCH": str(self.scratch / name)}}

    def add(self):
        self.added += 1
        node = self.cluster.add_node(**self._node_args(f"node-{self.added}"))  # a new machine, a new mirror
        self.cluster.wait_for_nodes()
        self.workers.append(node)
        return node

    def task_pids(self, node) -> list[int]:
        return [pid for pid in children(raylet_pid(node)) if title(pid).startswith(TASK_TITLE)]

    def kill(self, node) -> None:
        """SIGKILL the node's raylet and every process it started (its workers)."""
        started = children(raylet_pid(node))
        self.cluster.remove_node(node, allow_graceful=False)
        for pid in started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.workers.remove(node)


@pytest.fixture(scope="module")
def nodes(s3, tmp_path_factory):
    """Started after the S3 fixture set the AWS settings, which the nodes' workers inherit."""
    cluster = Nodes(tmp_path_factory.mktemp("scratch"))
    yield cluster
    cluster.cluster.shutdown()


def raylet_pid(node) -> int:
    from ray._private import ray_constants

    return node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid


def children(parent: int) -> list[int]:
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == parent:
                pids.append(int(stat.parent.name))
    return pids


def title(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@contextlib.contextmanager
def stopped(pid: int):
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def command(config: Path, run: str) -> list[str]:
    return [sys.executable, "-m", "pipeline", "run", str(config), "--out", f"s3://{BUCKET}/{run}"]


class Driver:
    """``prep run --executor ray`` on the cluster, its progress lines read as they come."""

    def __init__(self, config: Path, run: str, address: str):
        self.proc = subprocess.Popen(
            command(config, run) + ["--executor", "ray", "--address", address, "--progress", "json"],
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.totals: dict[str, int] = {}  # a phase's task count, from its first progress line, in run order
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line)
            if line.startswith("{"):
                record = json.loads(line)
                if "units_total" in record:  # a progress line, not the summary (the last line)
                    self.totals.setdefault(record["phase"], record["units_total"])

    def finish(self) -> str:
        """Wait for the end; the stderr it printed (the summary, one JSON object, at its end)."""
        self.proc.wait(timeout=600)
        self.reader.join()
        return "".join(self.lines)


def marker_prefix(phase: str, driver: Driver) -> str:
    """The keys of ``phase``'s markers (a finalize round's: by its place among the rounds)."""
    if "{round}" not in PHASES[phase]:
        return PHASES[phase]
    seen = list(driver.totals)
    return PHASES[phase].format(round=seen.index(phase) - seen.index(FIRST_FINALIZE_ROUND))


def markers(s3, run: str, prefix: str) -> int:
    stats = s3.get_file_info(pafs.FileSelector(f"{BUCKET}/{run}/stats", recursive=True, allow_not_found=True))
    return sum(1 for i in stats if i.path.startswith(f"{BUCKET}/{run}/{prefix}") and i.path.endswith(".json"))


def stored_digest(s3, prefix: str, local: Path) -> dict[str, str]:
    pafs.copy_files(prefix, str(local), source_filesystem=s3)
    return tree_digest(local)


def kill_in_phase(nodes: Nodes, driver: Driver, s3, run: str, phase: str) -> None:
    """Kill the worker node that runs a task of ``phase`` (the module's docstring says how it knows)."""
    while driver.proc.poll() is None:
        running = [(node, pid) for node in list(nodes.workers) for pid in nodes.task_pids(node)]
        for node, pid in running:
            with stopped(pid):
                if (
                    phase in driver.totals
                    and title(pid).startswith(TASK_TITLE)
                    and markers(s3, run, marker_prefix(phase, driver)) < driver.totals[phase]
                ):
                    nodes.kill(node)
                    return
        threading.Event().wait(0.01)  # how often to look, not what is seen
    raise AssertionError(f"the run ended before a task of {phase!r} ran on a worker node")


@pytest.mark.parametrize("phase", list(PHASES))
@pytest.mark.ray
@pytest.mark.slow
def test_a_node_killed_in_a_phase_costs_its_tasks_and_no_bytes(s3, config, local_run, nodes, phase, tmp_path):
    run = "killed-in-" + re.sub(r"\W+", "-", phase)
    driver = Driver(config, run, nodes.cluster.address)
    kill_in_phase(nodes, driver, s3, run, phase)
    nodes.add()  # the next test's cluster has three nodes again
    stderr = driver.finish()
    assert driver.proc.returncode == 0, stderr[-3000:]
    assert stored_digest(s3, f"{BUCKET}/{run}", tmp_path / "run") == local_run
    retried = json.loads(s3.open_input_stream(f"{BUCKET}/{run}/cost.json").read())["task_retries"]
    assert retried.get(phase, 0) >= 1, retried
    summary = json.loads(stderr.splitlines()[-1])  # --progress json ends with the summary as one object
    assert summary["task_retries"][phase] == retried[phase]


@pytest.mark.ray
@pytest.mark.slow
def test_a_killed_driver_resumes_with_the_same_command(s3, config, local_run, nodes, tmp_path):
    run = "driver-killed"
    driver = Driver(config, run, nodes.cluster.address)
    while "dedup: reduce" not in driver.totals and driver.proc.poll() is None:
        threading.Event().wait(0.01)
    os.killpg(driver.proc.pid, signal.SIGKILL)
    driver.finish()
    assert s3.get_file_info(f"{BUCKET}/{run}/manifest.json").type == pafs.FileType.NotFound, "killed too late"
    read = pafs.FileSelector(f"{BUCKET}/{run}/stats/segment-0", recursive=True)
    before = {i.path: i.mtime_ns for i in s3.get_file_info(read)}
    again = Driver(config, run, nodes.cluster.address)
    stderr = again.finish()
    assert again.proc.returncode == 0, stderr[-3000:]
    assert stored_digest(s3, f"{BUCKET}/{run}", tmp_path / "run") == local_run
    assert before and {i.path: i.mtime_ns for i in s3.get_file_info(read)} == before, "the resumed run read again"

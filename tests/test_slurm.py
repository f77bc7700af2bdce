"""examples/slurm/prep.sbatch on a real Slurm: the same bytes as a local run, and a run
that the allocation's time limit ends mid-run resumes, both when resubmitted and when the
job requeues itself on the warning signal before the limit.

The test starts a one-node Slurm from Debian's slurm-wlm (munged, slurmctld and slurmd on
localhost, with a key, a slurm.conf and state in a temporary folder) and stops it at the
end. slurmd runs jobs as their user, so it runs as root; without cgroups (linuxproc
tracks the processes, no task plugin), as in a container.

A time limit strikes whenever slurmctld next looks (every few seconds), and this sample
runs for seconds: so the time-out test freezes the job (SIGSTOP to every process Slurm
lists for it) once a unit is committed and before the last, and the limit then ends a
run that cannot have moved on. Slurm sends SIGCONT and SIGTERM, then SIGKILL: what any
job past its limit receives.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import LIGHT_SAMPLE_CONFIG, REPO
from test_run import tree_digest

pytest.importorskip("ray")
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "scancel", "sinfo")


def needs_slurm(test):
    """Marked slurm, and slow (minutes: outside the default suite and CI); skipped where
    Slurm is not installed or the test is not root."""
    for mark in (
        pytest.mark.slurm,
        pytest.mark.slow,
        pytest.mark.skipif(
            not all(shutil.which(name) for name in DAEMONS),
            reason="needs Slurm and munge (apt-get install slurm-wlm munge)",
        ),
        pytest.mark.skipif(os.geteuid() != 0, reason="slurmd runs jobs as their user: needs root"),
    ):
        test = mark(test)
    return test


RECIPE = REPO / "examples" / "slurm" / "prep.sbatch"
SAMPLE = REPO / "data" / "sample"
WAIT = 300  # seconds for a daemon or a job, far above what they take
KEPT = "finished units are kept"
# A job in these states may still run (STOPPED: frozen by a signal, its clock still going).
ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "STOPPED", "SUSPENDED", "REQUEUED", "RESIZING"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def slurm_conf(folder: Path, node: str) -> str:
    """A one-node cluster whose every path is in ``folder``; no cgroups, no accounting."""
    return f"""\
ClusterName=preptest
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={folder}/munge.socket
CredType=cred/munge
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
KillWait=10
NodeName={node} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""


class Slurm:
    """The running cluster: its environment for clients and jobs, and job helpers."""

    def __init__(self, folder: Path, env: dict[str, str]):
        self.folder = folder
        self.env = env

    def run(self, *command: str) -> str:
        return subprocess.run(command, env=self.env, capture_output=True, text=True, check=True).stdout

    def submit(self, config: Path, out: Path, *sbatch: str) -> str:
        """sbatch the recipe for one node, as a user would; returns the job id."""
        log = self.folder / "job-%j.log"
        return self.run(
            "sbatch", "--parsable", "--nodes=1", f"--output={log}", *sbatch, str(RECIPE), str(config), str(out), "-q"
        ).strip()

    def job(self, job: str) -> dict[str, str]:
        fields = self.run("scontrol", "show", "job", "--oneliner", job).split()
        return dict(field.split("=", 1) for field in fields if "=" in field)

    def log(self, job: str) -> str:
        return (self.folder / f"job-{job}.log").read_text(errors="replace")

    def wait(self, job: str, until=lambda fields: fields["JobState"] not in ACTIVE) -> dict:
        deadline = time.monotonic() + WAIT
        while not until(fields := self.job(job)):
            assert time.monotonic() < deadline, f"job {job} still {fields['JobState']}:\n{self.log(job)}"
            time.sleep(0.5)
        return fields

    def freeze(self, job: str) -> None:
        """SIGSTOP every process of the job (the batch script, its steps, all of Ray's
        processes), again until none runs: one started meanwhile is caught the next time."""
        deadline = time.monotonic() + WAIT
        while running := [pid for pid in self.pids(job) if not _stopped(pid)]:
            assert time.monotonic() < deadline, f"job {job} did not stop"
            for pid in running:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
            time.sleep(0.2)

    def pids(self, job: str) -> list[int]:
        rows = self.run("scontrol", "listpids", job).splitlines()[1:]
        return [int(row.split()[0]) for row in rows]


def _stopped(pid: int) -> bool:
    """Stopped, or gone; the state letter follows the command's closing parenthesis."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in "TtZX"


def _start(command: list[str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as sink:
        return subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    folder = tmp_path_factory.mktemp("slurm")
    for name in ("state", "spool"):
        (folder / name).mkdir()
    key = folder / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    node = socket.gethostname().split(".")[0]
    conf = folder / "slurm.conf"
    conf.write_text(slurm_conf(folder, node))
    ray_temp = tempfile.mkdtemp(prefix="prep-ray-")  # short: Ray's socket paths must fit 107 bytes
    python_bin = str(Path(sys.executable).parent)  # where `ray` is
    env = {
        **os.environ,
        "SLURM_CONF": str(conf),
        "PATH": f"{python_bin}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "PYTHON": sys.executable,
        "PREP": f"{sys.executable} -m pipeline",
        # Ports of their own: other Ray clusters may run on this host.
        "PREP_RAY_PORT": str(free_port()),
        "RAY_START_ARGS": (
            f"--include-dashboard=false --disable-usage-stats --temp-dir={ray_temp} "
            f"--dashboard-agent-listen-port={free_port()}"
        ),
    }
    daemons = [
        _start(
            [
                "munged", "--foreground", "--force", f"--key-file={key}", f"--socket={folder}/munge.socket",
                f"--pid-file={folder}/munged.pid", f"--log-file={folder}/munged.log",
                f"--seed-file={folder}/munged.seed",
            ],
            folder / "munged.out",
        )
    ]  # fmt: skip
    cluster = Slurm(folder, env)
    try:
        _wait_for(lambda: (folder / "munge.socket").exists(), "munged's socket", folder / "munged.log")
        daemons.append(_start(["slurmctld", "-D", "-f", str(conf)], folder / "slurmctld.out"))
        daemons.append(_start(["slurmd", "-D", "-f", str(conf), "-N", node], folder / "slurmd.out"))
        _wait_for(lambda: _node_state(cluster) == "idle", "an idle node", folder / "slurmctld.log")
        yield cluster
    finally:
        for job in subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True).stdout.split():
            subprocess.run(["scancel", job], env=env)
        for daemon in reversed(daemons):
            _stop(daemon)
        shutil.rmtree(ray_temp, ignore_errors=True)


def _node_state(cluster: Slurm) -> str:
    try:
        return cluster.run("sinfo", "--noheader", "--format=%T").strip()
    except subprocess.CalledProcessError:
        return ""  # slurmctld not answering yet


def _wait_for(ready, what: str, log: Path) -> None:
    deadline = time.monotonic() + WAIT
    while not ready():
        assert time.monotonic() < deadline, f"no {what}:\n{log.read_text(errors='replace') if log.exists() else ''}"
        time.sleep(0.2)


def local_run(config: Path, out: Path) -> dict[str, str]:
    command = [sys.executable, "-m", "pipeline", "run", str(config), "--out", str(out), "-q", "-w", "2"]
    subprocess.run(command, check=True, capture_output=True)
    return tree_digest(out)


@pytest.fixture(scope="module")
def longer_config(tmp_path_factory) -> Path:
    """The light chain over four copies of each sample file: 28 units, long enough to
    stop between the first and the last."""
    folder = tmp_path_factory.mktemp("longer")
    text = LIGHT_SAMPLE_CONFIG.read_text()
    for source in ("web", "code", "math"):
        for path in sorted((SAMPLE / source).iterdir()):
            if path.name.endswith(".gz"):
                for copy in range(4):
                    target = folder / "inputs" / source / f"{copy}-{path.name}"
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(path, target)
        text = text.replace(f"../../data/sample/{source}/", f"inputs/{source}/")
    (folder / "longer.toml").write_text(text)
    return folder / "longer.toml"


@pytest.fixture(scope="module")
def longer(longer_config) -> tuple[Path, dict[str, str]]:
    """``longer_config`` and its local run's digest."""
    return longer_config, local_run(longer_config, longer_config.parent / "local")


def markers(out: Path) -> dict[str, int]:
    """The committed units' markers (relative path -> mtime): a resumed run keeps them."""
    return {str(p.relative_to(out)): p.stat().st_mtime_ns for p in (out / "stats").glob("segment-*/*/*.json")}


def wait_for_units(cluster: Slurm, job: str, out: Path) -> None:
    """Until the job has committed a unit; it must still be running."""
    deadline = time.monotonic() + WAIT
    while not markers(out):
        state = cluster.job(job)["JobState"]
        assert state in ACTIVE, f"job {job} ended {state} before a unit:\n{cluster.log(job)}"
        assert time.monotonic() < deadline, f"job {job} committed no unit:\n{cluster.log(job)}"
        time.sleep(0.05)


@needs_slurm
def test_recipe_gives_the_bytes_of_a_local_run(slurm, tmp_path):
    expected = local_run(LIGHT_SAMPLE_CONFIG, tmp_path / "local")
    job = slurm.submit(LIGHT_SAMPLE_CONFIG, tmp_path / "slurm")
    fields = slurm.wait(job)
    assert fields["JobState"] == "COMPLETED", slurm.log(job)
    assert "Ray at" in slurm.log(job)  # the run went through the recipe's Ray cluster
    assert tree_digest(tmp_path / "slurm") == expected


@needs_slurm
def test_a_run_past_its_time_limit_resumes_when_resubmitted(slurm, longer, tmp_path):
    config, expected = longer
    out = tmp_path / "out"
    job = slurm.submit(config, out, "--time=10")
    wait_for_units(slurm, job, out)
    slurm.freeze(job)
    kept = markers(out)
    assert not (out / "manifest.json").exists(), "the run finished before it was frozen"
    slurm.run("scontrol", "update", f"JobId={job}", "TimeLimit=1")  # a minute: already past, or soon
    assert slurm.wait(job)["JobState"] == "TIMEOUT", slurm.log(job)
    assert KEPT in slurm.log(job)  # prep took the SIGTERM and stopped at a clean point

    again = slurm.submit(config, out)
    assert slurm.wait(again)["JobState"] == "COMPLETED", slurm.log(again)
    assert tree_digest(out) == expected
    assert {name: markers(out)[name] for name in kept} == kept  # resumed: no finished unit redone


@needs_slurm
def test_the_warning_before_the_limit_requeues_the_job_and_it_resumes(slurm, longer, tmp_path):
    """``#SBATCH --signal=B:USR1@300`` sends USR1 to the batch script 5 minutes before
    the limit; ``scancel --batch --signal=USR1`` sends the same signal now."""
    config, expected = longer
    out = tmp_path / "out"
    job = slurm.submit(config, out)
    wait_for_units(slurm, job, out)
    kept = markers(out)
    slurm.run("scancel", "--batch", "--signal=USR1", job)
    fields = slurm.wait(job, until=lambda fields: fields["JobState"] == "COMPLETED" or fields["Restarts"] != "0")
    assert fields["Restarts"] == "1", slurm.log(job)  # requeued by the recipe, not finished
    fields = slurm.wait(job)
    assert fields["JobState"] == "COMPLETED", slurm.log(job)
    log = slurm.log(job)  # --open-mode=append: both starts
    assert KEPT in log and "requeued" in log
    assert tree_digest(out) == expected
    assert {name: markers(out)[name] for name in kept} == kept


@pytest.mark.ray
def test_a_sigterm_ends_a_ray_run_with_the_resume_line(longer_config, tmp_path):
    """What Slurm sends every process of a job at its time limit, to a run's driver:
    ``ray.init`` had put its own SIGTERM handler in place of prep's."""
    out = tmp_path / "out"
    command = [sys.executable, "-m", "pipeline", "run", str(longer_config), "--out", str(out), "-q"]
    run = subprocess.Popen([*command, "--executor", "ray", "-w", "2"], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + WAIT
    while not markers(out):
        assert run.poll() is None and time.monotonic() < deadline, run.stderr.read()
        time.sleep(0.05)
    run.send_signal(signal.SIGTERM)
    _, stderr = run.communicate(timeout=WAIT)
    assert run.returncode == 143, stderr
    assert f"terminated: {KEPT}" in stderr

"""An object store that fails like a real one (``s3_faults``: 503 SlowDown, 500, connections
reset in the request and in the response, slow answers, by a seeded schedule): a run
through it gives the bytes of a run without it and counts what it retried by kind; a store
that keeps failing ends the run with one line naming the key, and the rerun resumes.
Below those, the backoff itself (``pipeline.engine.retry``): bounded, jittered, and only
for errors that waiting can heal."""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys
from collections import Counter

import pyarrow.fs as pafs
import pytest
from s3_faults import FAULTS, MAX_IN_A_ROW, FaultyProxy, Schedule
from test_s3 import dedup_config, download, local_run, same_run, upload_sample  # noqa: F401  (local_run: a fixture)

from pipeline.engine import retry
from pipeline.engine.retry import Policy, StoreFailing, kind_of, retrying
from pipeline.engine.run import run_pipeline
from pipeline.engine.summary import print_summary, store_retry_lines

pytest.importorskip("moto.server")

# What pyarrow 26 raised through the proxy, one of each (``AWS Error ...`` is the SDK's).
SLOWDOWN = "When listing objects under key '' in bucket 'b': AWS Error SLOW_DOWN during ListObjectsV2 operation: Please"
HEAD_503 = "When getting information for key 'k' in bucket 'b': AWS Error UNKNOWN (HTTP status 503) during HeadObject"
INTERNAL = "When uploading part for key 'k' in bucket 'b': AWS Error INTERNAL_FAILURE during UploadPart operation: We"
HEAD_500 = "When getting information for key 'k' in bucket 'b': AWS Error UNKNOWN (HTTP status 500) during HeadObject"
RESET = (
    "When reading information for key 'k' in bucket 'b': AWS Error NETWORK_CONNECTION during HeadObject operation: "
    "curlCode: 56, Failure when receiving data from the peer; Details: Recv failure: Connection reset by peer"
)
CUT = "AWS Error NETWORK_CONNECTION during GetObject operation: curlCode: 18, Transferred a partial file"
DENIED = (
    "When getting information for key 'k' in bucket 'b': AWS Error ACCESS_DENIED (HTTP status 403) during HeadObject"
)
NO_BUCKET = "When listing objects in bucket 'b': AWS Error NO_SUCH_BUCKET (HTTP status 404) during ListObjectsV2"
BAD_REQUEST = "When creating bucket 'B': AWS Error UNKNOWN (HTTP status 400) during CreateBucket operation: Unable"


@pytest.fixture
def flaky(s3, monkeypatch):
    """The proxy in front of the test server, and prep pointed at it (workers too: they
    take the run's environment); the ``s3`` file system still reaches the server direct."""
    proxy = FaultyProxy(os.environ["AWS_ENDPOINT_URL"].removeprefix("http://"), Schedule(seed=44))
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{proxy.endpoint}")
    yield proxy
    proxy.stop()


@pytest.fixture(autouse=True)
def scratch(tmp_path, monkeypatch):
    monkeypatch.setenv("PREP_SCRATCH", str(tmp_path / "scratch"))


def stored_cost(s3, run: str) -> dict:
    return json.loads(s3.open_input_stream(f"{run}/cost.json").read())


@pytest.mark.slow
def test_a_run_through_a_failing_store_gives_the_same_bytes_and_counts_its_retries(s3, flaky, local_run, tmp_path):  # noqa: F811
    upload_sample(s3, "flaky")
    run_pipeline(dedup_config(tmp_path / "remote.toml", "s3://flaky/in"), "s3://flaky/run", workers=2, quiet=True)
    same_run(local_run, download(s3, "flaky/run", tmp_path / "downloaded"))
    served = flaky.schedule.served
    retried = stored_cost(s3, "flaky/run")["store_retries"]
    print(f"faults served {dict(served)}, retries counted {retried}")
    assert min(served[f] for f in ("slowdown", "server-error", "reset-request", "reset-response", "slow")) > 0
    assert retried["slowdown"] > 0 and retried["server-error"] > 0 and retried["reset"] > 0
    # Every fault the run met was retried (but those after cost.json was written: its own
    # upload, the manifest's, the lease's release), so at most as many retries as faults.
    assert retried["slowdown"] <= served["slowdown"] and retried["server-error"] <= served["server-error"]
    assert retried["reset"] <= served["reset-request"] + served["reset-response"]
    assert sum(retried.values()) > 0.5 * sum(served[f] for f in FAULTS)  # the workers' reached the driver
    summary = io.StringIO()
    print_summary(json.loads(s3.open_input_stream("flaky/run/manifest.json").read()), "s3://flaky/run", summary)
    assert f"store retries: {', '.join(f'{kind} {n:,}' for kind, n in retried.items())}" in summary.getvalue()


@pytest.mark.slow
def test_a_store_that_keeps_failing_ends_the_run_in_one_line_and_the_rerun_resumes(s3, flaky, local_run, tmp_path):  # noqa: F811
    upload_sample(s3, "stuck")
    config = dedup_config(tmp_path / "remote.toml", "s3://stuck/in")
    command = [sys.executable, "-m", "pipeline", "run", str(config), "--out", "s3://stuck/run", "-w", "2", "-q"]
    flaky.schedule.fail_always = "/stuck/run/docs/math/"  # the last phase's outputs of one source
    env = {**os.environ, "PREP_STORE_ATTEMPTS": str(MAX_IN_A_ROW + 1)}  # past every streak, fast
    failed = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert failed.returncode == 1
    assert failed.stderr.count("\n") == 1, failed.stderr
    line = failed.stderr.strip()
    assert line.startswith("Error: object store kept failing on s3://stuck/run/docs/math/"), line
    assert f" after {MAX_IN_A_ROW + 1} attempts over " in line and "(503 SlowDown: " in line, line
    assert line.endswith(
        "; rerun the same command to resume (PREP_STORE_ATTEMPTS and PREP_STORE_RETRY_SECONDS set how long it tries)"
    )
    assert s3.get_file_info("stuck/run/manifest.json").type == pafs.FileType.NotFound
    markers_before = {i.path for i in s3.get_file_info(pafs.FileSelector("stuck/run/stats", recursive=True))}
    assert markers_before, "the phases before the failing one finished and stay finished"
    flaky.schedule.fail_always = None  # healed
    resumed = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    same_run(local_run, download(s3, "stuck/run", tmp_path / "downloaded"))


@pytest.mark.ray
@pytest.mark.slow
def test_ray_tasks_carry_their_store_retries_to_the_summary(s3, flaky, local_run, tmp_path):  # noqa: F811
    pytest.importorskip("ray")
    upload_sample(s3, "rayflaky")
    config = dedup_config(tmp_path / "remote.toml", "s3://rayflaky/in")
    command = [sys.executable, "-m", "pipeline", "run", str(config), "--out", "s3://rayflaky/run", "-w", "2"]
    result = subprocess.run([*command, "--executor", "ray", "--progress", "none"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    same_run(local_run, download(s3, "rayflaky/run", tmp_path / "downloaded"))
    retried = stored_cost(s3, "rayflaky/run")["store_retries"]
    assert retried["slowdown"] > 0 and retried["server-error"] > 0 and retried["reset"] > 0
    # More than the driver's own requests met: the tasks' retries reached it.
    assert sum(retried.values()) > 0.5 * sum(flaky.schedule.served[f] for f in FAULTS)
    assert "  store retries: " in result.stderr


def test_pyarrows_own_retries_are_off_so_every_retry_is_counted(s3, flaky):
    """The SDK would try each request 3 times inside one call, unseen; prep's file systems
    try once, and ``retrying`` does the rest."""
    from pipeline.engine.storage import filesystem

    s3.create_dir("once")
    flaky.schedule.fail_always = ""
    fs, key = filesystem("s3://once/k")
    with pytest.raises(OSError, match="HTTP status 503"):
        fs.get_file_info(key)
    assert flaky.schedule.served["slowdown"] == 1


def test_the_proxys_schedule_is_seeded_per_request():
    """Two schedules of one seed give each request's attempts the same fates, whatever the
    order the requests come in. Faults come in streaks, some longer than the AWS SDK's 3
    tries, none longer than MAX_IN_A_ROW."""
    requests = [("GET", f"/b/k{i}", "") for i in range(1000)] * 6
    first, second = Schedule(seed=7), Schedule(seed=7)
    fates = [first.fate(*r) for r in requests]
    backwards = [second.fate(*r) for r in reversed(requests[:1000])] + [second.fate(*r) for r in requests[1000:]]
    assert fates[:1000] == backwards[:1000][::-1] and fates[1000:] == backwards[1000:]
    assert 0.07 < sum(f in FAULTS for f in fates) / len(fates) < 0.13
    streaks = Counter()  # how many requests failed n attempts running, at most
    for i in range(1000):
        attempts = "".join("x" if f in FAULTS else "." for f in fates[i::1000])
        streaks[max(len(run) for run in attempts.split("."))] += 1
    assert streaks[3] + streaks[4] > 0 and max(streaks) == MAX_IN_A_ROW


@pytest.mark.parametrize(
    "message, kind",
    [
        (SLOWDOWN, "slowdown"),
        (HEAD_503, "slowdown"),
        (INTERNAL, "server-error"),
        (HEAD_500, "server-error"),
        (RESET, "reset"),
        (CUT, "reset"),
        (
            "AWS Error INTERNAL_FAILURE during GetObject operation: Failed to flush response stream (eof: 0, bad: 1)",
            "reset",
        ),
        ("AWS Error SERVICE_UNAVAILABLE during GetObject operation: ", "slowdown"),
        ("AWS Error NETWORK_CONNECTION during GetObject operation: curlCode: 28, Timeout was reached", "reset"),
        (DENIED, None),
        (NO_BUCKET, None),
        (BAD_REQUEST, None),
        ("Path does not exist 'b/k'", None),
        ("[Errno 28] No space left on device", None),
    ],
)
def test_which_errors_are_retried(message, kind):
    assert kind_of(OSError(message)) == kind


class Failing:
    """An action that raises ``errors`` in turn, then returns "done"; counts its calls."""

    def __init__(self, *errors: str):
        self.errors, self.calls = list(errors), 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise OSError(self.errors.pop(0))
        return "done"


@pytest.fixture
def waits(monkeypatch) -> list[float]:
    """The waits ``retrying`` asks for, recorded instead of slept."""
    waited: list[float] = []
    monkeypatch.setattr(retry.time, "sleep", waited.append)
    retry.take_retries()
    return waited


FS = pafs.S3FileSystem(region="us-east-1", endpoint_override="127.0.0.1:9", scheme="http")


def test_transient_errors_are_retried_with_growing_jittered_waits_and_counted(waits):
    random.seed(3)
    action = Failing(SLOWDOWN, INTERNAL, RESET, HEAD_503)
    assert retrying(FS, "b/k", action, rules=Policy(attempts=5, base=0.1, cap=0.3)) == "done"
    assert action.calls == 5
    assert [0 <= w < bound for w, bound in zip(waits, (0.1, 0.2, 0.3, 0.3))] == [True] * 4
    assert retry.take_retries() == {"slowdown": 2, "server-error": 1, "reset": 1}
    assert retry.take_retries() == {}  # taken


def test_waits_are_full_jitter_under_a_doubling_cap():
    random.seed(5)
    rules = Policy(base=0.1, cap=20.0)
    for n in range(10):
        draws = [rules.delay(n) for _ in range(500)]
        bound = min(20.0, 0.1 * 2**n)
        assert 0 <= min(draws) < 0.1 * bound and 0.9 * bound < max(draws) < bound


def test_an_error_waiting_cannot_heal_is_raised_at_once(waits):
    for message in (DENIED, NO_BUCKET, BAD_REQUEST):
        action = Failing(message)
        with pytest.raises(OSError, match=message.split(":")[0]) as raised:
            retrying(FS, "b/k", action)
        assert action.calls == 1 and not isinstance(raised.value, StoreFailing)
    assert waits == [] and retry.take_retries() == {}


def test_past_the_bound_of_attempts_the_error_names_the_key(waits):
    action = Failing(*[SLOWDOWN] * 10)
    with pytest.raises(StoreFailing) as raised:
        retrying(FS, "b/run/docs/k.parquet", action, rules=Policy(attempts=4))
    assert action.calls == 4 and len(waits) == 3
    assert str(raised.value).startswith("object store kept failing on s3://b/run/docs/k.parquet after 4 attempts over ")
    assert "(503 SlowDown: When listing objects" in str(raised.value)
    assert "rerun the same command to resume" in str(raised.value)


def test_past_the_bound_of_time_no_attempt_starts(waits, monkeypatch):
    clock = iter(range(0, 1000, 25))  # each look at the clock: 25 s later; at 75 s, a wait would end past 60
    monkeypatch.setattr(retry.time, "monotonic", lambda: next(clock))
    action = Failing(*[RESET] * 10)
    with pytest.raises(StoreFailing, match=r"after 3 attempts over 75\.0 s \(connection reset or timed out"):
        retrying(FS, "b/k", action, rules=Policy(attempts=10, seconds=60))
    assert action.calls == 3


@pytest.mark.parametrize(
    "name, value, words",
    [
        ("PREP_STORE_ATTEMPTS", "0", "must be at least 1"),
        ("PREP_STORE_ATTEMPTS", "2.5", "not a whole number"),
        ("PREP_STORE_ATTEMPTS", "many", "is not a number"),
        ("PREP_STORE_RETRY_SECONDS", "nan", "not a finite number"),
        ("PREP_STORE_RETRY_SECONDS", "-1", "must be at least 0"),
    ],
)
def test_a_bad_retry_setting_is_refused_by_name(monkeypatch, name, value, words):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=f"{name}: .*{words}"):
        retry.policy()


def test_the_settings_set_the_bound(monkeypatch):
    monkeypatch.setenv("PREP_STORE_ATTEMPTS", "3")
    monkeypatch.setenv("PREP_STORE_RETRY_SECONDS", "7.5")
    assert retry.policy() == Policy(attempts=3, seconds=7.5)


def test_the_summary_line_of_store_retries():
    assert store_retry_lines({"store_retries": {"reset": 7, "server-error": 5, "slowdown": 12}}) == [
        "  store retries: reset 7, server-error 5, slowdown 12 (object-store requests tried again after throttling "
        "or a failure)"
    ]
    assert store_retry_lines({"store_retries": {}}) == store_retry_lines(None) == store_retry_lines({}) == []

"""Inputs on the Hugging Face Hub (``hf://``): a run over Hub paths (a glob, a pinned
revision, the Parquet conversion) keeps the same documents as the same run over local
copies, resumes without work, and fails in one line that names the path.

No test reaches the network. The Hub is huggingface_hub's real ``HfFileSystem`` (its path
parsing, revisions, listing cache and errors) over ``LocalHubApi``, a stand-in for the
few Hub API calls it makes, answered from a local folder; only its transfers (``get_file``,
``_open``) read local files instead of HTTP. Runs in a subprocess (and their spawned
workers) get it through a ``sitecustomize`` on ``PYTHONPATH`` that calls ``install``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO, write_config

from pipeline.engine import hub
from pipeline.engine.config import ConfigError, load_config
from pipeline.engine.run import _planned_units, run_pipeline

huggingface_hub = pytest.importorskip("huggingface_hub")
from huggingface_hub import HfFileSystem  # noqa: E402
from huggingface_hub.errors import (  # noqa: E402
    EntryNotFoundError,
    GatedRepoError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.hf_api import RepoFile, RepoFolder  # noqa: E402

try:
    from httpx2 import Request, Response
except ModuleNotFoundError:  # older huggingface_hub: httpx
    from httpx import Request, Response

SHARED = Path("/work/shared/data/web")
GUARDIAN = SHARED / "olmo_paloma_c4_100_domains_guardian_val.jsonl.gz"
SHA = "0123456789abcdef0123456789abcdef01234567"
REPO_ID = "allenai/c4-mini"
HUB_ENV = "PREP_TEST_HUB_ROOT"  # the subprocesses' stand-in: its folder
LOG_ENV = "PREP_TEST_HUB_LOG"  # a file each download appends its path to

# -- the stand-in -------------------------------------------------------------------------


def _error(cls, message: str, status: int):
    return cls(message, response=Response(status, request=Request("GET", "https://huggingface.co/api")))


class LocalHubApi:
    """The HfApi calls HfFileSystem makes to list and resolve, answered from
    ``<root>/<repo type>s/<namespace>/<name>/<revision>/...`` (the revision may hold
    slashes: ``refs/convert/parquet``). A repo with a ``GATED`` file is gated."""

    def __init__(self, root: Path):
        self.root = root

    def _repo(self, repo_id: str, repo_type: str | None) -> Path:
        folder = self.root / f"{repo_type or 'model'}s" / repo_id
        if not folder.is_dir():
            raise _error(RepositoryNotFoundError, f"Repository Not Found for {repo_id}", 404)
        return folder

    def _revision(self, repo_id: str, revision: str | None, repo_type: str | None) -> Path:
        folder = self._repo(repo_id, repo_type) / (revision or "main")
        if not folder.is_dir() or revision in ("refs", "refs/convert"):
            raise _error(RevisionNotFoundError, f"Invalid rev id: {revision}", 404)
        return folder

    def repo_info(self, repo_id, *, revision=None, repo_type=None, **_):
        self._revision(repo_id, revision, repo_type)
        return {"id": repo_id}

    @staticmethod
    def _entry(path: Path, rel: str) -> RepoFile | RepoFolder:
        if path.is_dir():
            return RepoFolder(path=rel, oid="tree-" + hashlib.sha1(rel.encode()).hexdigest())
        data = path.read_bytes()
        blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        lfs = {"size": len(data), "oid": hashlib.sha256(data).hexdigest(), "pointerSize": 134}
        return RepoFile(path=rel, size=len(data), oid=blob, lfs=lfs if path.suffix in (".gz", ".parquet") else None)

    def list_repo_tree(self, repo_id, path_in_repo=None, *, recursive=False, revision=None, repo_type=None, **_):
        base = self._revision(repo_id, revision, repo_type)
        folder = base / (path_in_repo or "")
        if not folder.is_dir():
            raise EntryNotFoundError(f"{path_in_repo} does not exist on {revision}")
        children = sorted(folder.rglob("*") if recursive else folder.iterdir())
        return [self._entry(p, p.relative_to(base).as_posix()) for p in children if p.name != "GATED"]

    def _iter_repo_tree_pages(self, repo_id, path_in_repo=None, **kwargs):
        yield self.list_repo_tree(repo_id, path_in_repo, **kwargs), True

    def get_paths_info(self, repo_id, paths, *, revision=None, repo_type=None, **_):
        base = self._revision(repo_id, revision, repo_type)
        paths = [paths] if isinstance(paths, str) else paths
        return [self._entry(base / p, p) for p in paths if (base / p).exists()]


class LocalHub(HfFileSystem):
    """huggingface_hub's HfFileSystem with ``LocalHubApi`` for the Hub and local reads."""

    def __init__(self, root: str, **kwargs):
        super().__init__(**kwargs)
        self.local_root = Path(root)
        self._api = LocalHubApi(self.local_root)

    def _local(self, path: str) -> Path:
        resolved = self.resolve_path(path)
        repo = self._api._repo(resolved.repo_id, resolved.repo_type)
        if (repo / "GATED").exists():
            raise _error(GatedRepoError, f"Access to dataset {resolved.repo_id} is restricted.", 401)
        local = repo / resolved.revision / resolved.path_in_repo
        if not local.is_file():
            raise EntryNotFoundError(f"{path} not found")
        return local

    def _open(self, path, mode="rb", block_size=None, revision=None, **kwargs):
        local = self._local(path)
        _log("open", path)
        return open(local, mode)

    def get_file(self, rpath, lpath=None, **kwargs):
        local = self._local(rpath)
        _log("get", rpath)
        shutil.copyfile(local, lpath)


def _log(kind: str, path: str) -> None:
    if os.environ.get(LOG_ENV):
        with open(os.environ[LOG_ENV], "a") as log:
            log.write(f"{kind} {path}\n")


def install(root: str | Path) -> None:
    """Make ``hub.filesystem()`` return the stand-in over ``root`` in this process."""
    fs = LocalHub(str(root), skip_instance_cache=True)
    hub.filesystem = lambda: fs


def prep_env(root: Path, tmp_path: Path) -> dict:
    """Environment for a ``prep`` subprocess whose processes (workers too) see the stand-in."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(
        "import os, sys\n"
        f"if os.environ.get({HUB_ENV!r}):\n"
        f"    sys.path.insert(0, {str(REPO / 'tests')!r})\n"
        "    import test_hub\n"
        f"    test_hub.install(os.environ[{HUB_ENV!r}])\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")}
    # HF_HUB_OFFLINE: a request that escaped the stand-in fails instead of reaching out;
    # HF_HOME: no token saved by this machine's user.
    env.update({HUB_ENV: str(root), "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]), "HF_HUB_OFFLINE": "1"})
    env["HF_HOME"] = str(tmp_path / "hf-home")
    return env


# -- fixtures ----------------------------------------------------------------------------


def _parquet(records_from: Path, out: Path) -> None:
    rows = [json.loads(line) for line in pa.input_stream(str(records_from), compression="gzip").read().splitlines()]
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), out)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict:
    """A local copy of the inputs, and a Hub folder holding the same files: a dataset at
    ``main`` and at a commit sha, its Parquet conversion, and a gated dataset."""
    if not GUARDIAN.is_file() or not (SHARED / "datajuicer_redpajama_pile_samples.jsonl.gz").is_file():
        pytest.skip(f"{SHARED} is not present")
    base = tmp_path_factory.mktemp("hub")
    local = base / "local"
    other = SHARED / "datajuicer_redpajama_pile_samples.jsonl.gz"
    files = {"en/c4-train.00000-of-00002.json.gz": GUARDIAN, "en/c4-train.00001-of-00002.json.gz": other}
    for rel, source in files.items():
        (local / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, local / rel)
    _parquet(GUARDIAN, local / "default" / "train" / "0000.parquet")
    root = base / "hub"
    repo = root / "datasets" / REPO_ID
    for revision in ("main", SHA):
        shutil.copytree(local / "en", repo / revision / "en")
        (repo / revision / "README.md").write_text("# c4-mini\n")
    shutil.copytree(local / "default", repo / "refs" / "convert" / "parquet" / "default")
    gated = root / "datasets" / "someone" / "gated"
    shutil.copytree(local / "en", gated / "main" / "en")
    (gated / "GATED").touch()
    return {"local": local, "root": root}


@pytest.fixture
def standin(data, monkeypatch, tmp_path):
    fs = LocalHub(str(data["root"]), skip_instance_cache=True)
    monkeypatch.setattr(hub, "filesystem", lambda: fs)
    monkeypatch.setenv("PREP_SCRATCH", str(tmp_path / "scratch"))
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    return data


def sources(web: str, pinned: str, parquet: str, converted: str) -> str:
    return f"""
[sources.web]
paths = ["{web}"]
[sources.pinned]
paths = ["{pinned}"]
[sources.parquet]
paths = ["{parquet}"]
[sources.converted]
paths = ["{converted}"]
[[stages]]
name = "normalize"
[[stages]]
name = "length"
min_chars = 100
"""


def kept(out: Path) -> dict[str, list[dict]]:
    """Every source's kept documents, in order."""
    return {
        folder.name: [row for part in sorted(folder.glob("*.parquet")) for row in pq.read_table(part).to_pylist()]
        for folder in sorted((out / "docs").iterdir())
    }


# -- tests -------------------------------------------------------------------------------

HF = f"hf://datasets/{REPO_ID}"


def test_glob_revisions_and_parquet_conversion_are_listed(standin):
    names = [p.rsplit("/", 1)[1] for p in hub.glob(f"{HF}/en/c4-train.0000*-of-00002.json.gz")]
    assert names == ["c4-train.00000-of-00002.json.gz", "c4-train.00001-of-00002.json.gz"]
    assert hub.glob(f"{HF}@main/**/*.md") == [f"{HF}@main/README.md"]
    assert hub.glob(f"{HF}@{SHA}/en/c4-train.00001-of-00002.json.gz") == [
        f"{HF}@{SHA}/en/c4-train.00001-of-00002.json.gz"
    ]
    converted = [f"{HF}@refs/convert/parquet/default/train/0000.parquet"]
    assert hub.glob(f"{HF}@~parquet/default/train/*.parquet") == converted
    assert hub.glob(f"{HF}@refs/convert/parquet/*/train/*.parquet") == converted
    assert hub.glob(f"{HF}/en/*.parquet") == []
    size, version = hub.stat(f"{HF}/en/c4-train.00000-of-00002.json.gz")
    data = GUARDIAN.read_bytes()
    assert size == len(data) and version == f"sha256:{hashlib.sha256(data).hexdigest()}"
    assert hub.stat(f"{HF}/README.md")[1].startswith("git:")  # not on LFS: the blob id
    assert hub.sha256(f"{HF}/en/c4-train.00000-of-00002.json.gz") == hashlib.sha256(data).hexdigest()


def test_a_run_over_the_hub_keeps_the_documents_of_the_local_run(standin, tmp_path):
    local = standin["local"]
    local_config = write_config(
        tmp_path / "local.toml",
        sources(
            f"{local}/en/c4-train.0000*-of-00002.json.gz",
            f"{local}/en/c4-train.00001-of-00002.json.gz",
            f"{local}/default/train/*.parquet",
            f"{local}/default/train/0000.parquet",
        ),
    )
    hub_config = write_config(
        tmp_path / "hub.toml",
        sources(
            f"{HF}/en/c4-train.0000*-of-00002.json.gz",
            f"{HF}@{SHA}/en/c4-train.00001-of-00002.json.gz",
            f"{HF}@~parquet/default/train/*.parquet",
            f"{HF}@refs/convert/parquet/default/train/0000.parquet",
        ),
    )
    scratch = tmp_path / "scratch"
    expected = run_pipeline(local_config, tmp_path / "local-out", workers=1, quiet=True)
    manifest = run_pipeline(hub_config, tmp_path / "hub-out", workers=1, quiet=True)
    documents = kept(tmp_path / "local-out")
    assert set(documents) == {"web", "pinned", "parquet", "converted"} and all(documents.values())
    assert kept(tmp_path / "hub-out") == documents
    assert manifest["balance"] == expected["balance"]
    # a hub file's version is its size and content hash (what the hub names it by), not a time
    versions = {f.key: f.version for u in _planned_units(load_config(hub_config)) for f in u.files}
    content = hashlib.sha256(GUARDIAN.read_bytes()).hexdigest()
    assert versions["c4-train.00000-of-00002.json.gz"] == (GUARDIAN.stat().st_size, f"sha256:{content}")
    assert not any(p.is_file() for p in scratch.rglob("*")), "the copies in scratch are removed"


def test_prep_run_with_workers_then_resume_does_no_work(data, tmp_path):
    """The command line, two spawned workers, then the same command: nothing read again."""
    config = write_config(
        tmp_path / "hub.toml",
        sources(
            f"{HF}/en/c4-train.0000*-of-00002.json.gz",
            f"{HF}@main/en/c4-train.00001-of-00002.json.gz",
            f"{HF}@~parquet/default/train/*.parquet",
            f"{HF}@{SHA}/en/c4-train.00000-of-00002.json.gz",
        ),
    )
    env = prep_env(data["root"], tmp_path)
    env.update({"PREP_SCRATCH": str(tmp_path / "scratch"), LOG_ENV: str(tmp_path / "log")})
    out = tmp_path / "out"
    command = [sys.executable, "-m", "pipeline", "run", str(config), "--out", str(out), "-w", "2", "-q"]
    first = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert first.returncode == 0, first.stderr
    log = (tmp_path / "log").read_text().splitlines()
    assert sum(line.startswith("get ") for line in log) == 5  # each input copied once
    docs = {p: p.stat().st_mtime_ns for p in (out / "docs").rglob("*") if p.is_file()}
    assert docs
    (tmp_path / "log").unlink()
    again = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert again.returncode == 0, again.stderr
    # Only the config's check of each pattern (its first match's first byte): no copy, no hash.
    assert sorted(line.split()[0] for line in (tmp_path / "log").read_text().splitlines()) == ["open"] * 4
    assert {p: p.stat().st_mtime_ns for p in (out / "docs").rglob("*") if p.is_file()} == docs


@pytest.mark.parametrize(
    "path, message",
    [
        ("hf://datasets/nobody/nothing/*.json.gz", "hf://datasets/nobody/nothing/*.json.gz: repository not found"),
        (f"{HF}@v9/en/*.json.gz", f"{HF}@v9/en/*.json.gz: revision not found"),
        (f"{HF}/en/c4-train.00009-of-00002.json.gz", "matches no file"),
        (f"{HF}/fr/*.json.gz", "matches no file"),
        ("hf://datasets/someone/gated/en/*.json.gz", "gated repository and no HF_TOKEN set"),
        ("hf://datasets/allenai/c4*/en/*.gz", "wildcards work within the path in the repo"),
        ("hf://datasets/c4/en.json.gz", "repository not found"),
        ("hf://datasets/c4", "not a Hub path"),
    ],
)
def test_errors_name_the_path_in_one_line(standin, tmp_path, path, message):
    config = write_config(tmp_path / "c.toml", f'[sources.web]\npaths = ["{path}"]\n[[stages]]\nname = "length"\n')
    with pytest.raises(ConfigError) as error:
        load_config(config)
    assert message in str(error.value) and path in str(error.value) and "\n" not in str(error.value)


def test_a_gated_repo_with_a_token_without_access(standin, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secretvalue")
    with pytest.raises(hub.HubError) as error:
        hub.glob("hf://datasets/someone/gated/en/*.json.gz")
    assert "gated repository and the token set (HF_TOKEN) has no access" in str(error.value)
    assert "hf_secretvalue" not in str(error.value)


def test_the_command_line_says_one_line_and_no_traceback(data, tmp_path):
    env = prep_env(data["root"], tmp_path)
    missing = "hf://datasets/nobody/nothing/en/*.json.gz"
    config = write_config(tmp_path / "c.toml", f'[sources.web]\npaths = ["{missing}"]\n[[stages]]\nname = "length"\n')
    result = subprocess.run(
        [sys.executable, "-m", "pipeline", "run", str(config), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert result.returncode != 0 and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and missing in lines[0] and "repository not found" in lines[0], result.stderr
    good = write_config(
        tmp_path / "g.toml", f'[sources.web]\npaths = ["{HF}/en/*.json.gz"]\n[[stages]]\nname = "length"\n'
    )
    result = subprocess.run(
        [sys.executable, "-m", "pipeline", "run", str(good), "--out", f"{HF}/out"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "read-only" in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_file_gone_from_the_hub_after_listing_fails_in_one_line(standin, tmp_path):
    """A Hub file that disappears between the listing and the read (a new commit)."""
    uri = f"{HF}@{SHA}/en/c4-train.00001-of-00002.json.gz"
    gone = standin["root"] / "datasets" / REPO_ID / SHA / "en" / "c4-train.00001-of-00002.json.gz"
    saved = gone.read_bytes()
    gone.unlink()
    try:
        with pytest.raises(hub.HubError, match=r"^hf://.*00001-of-00002.json.gz: no such file") as error:
            hub.download(uri, tmp_path / "copy")
        assert "\n" not in str(error.value)
    finally:
        gone.write_bytes(saved)


def test_a_run_without_hub_paths_does_not_import_huggingface_hub(tmp_path):
    config = write_config(
        tmp_path / "c.toml",
        f'[sources.web]\npaths = ["{REPO}/data/sample/web/*.gz"]\n[[stages]]\nname = "length"\nmin_chars = 100\n',
    )
    code = (
        "import sys\n"
        "from pipeline.commands.main import main\n"
        f"main(['run', {str(config)!r}, '--out', {str(tmp_path / 'out')!r}, '-w', '1', '-q'], standalone_mode=False)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('huggingface_hub', 'fsspec')))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"
    assert (tmp_path / "out" / "manifest.json").is_file()


def test_without_huggingface_hub_installed_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # an import of it fails
    with pytest.raises(hub.HubError, match=r'hf:// paths need huggingface_hub: pip install -e "\.\[hub\]"'):
        hub.filesystem.__wrapped__()

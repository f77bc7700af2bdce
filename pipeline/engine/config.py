"""Loading and checking a run's TOML config.

A config never fails silently: an unknown key, stage or source is an error that names it
and the nearest valid word, and option values are checked against each stage's
``Options`` dataclass before any work starts.

Shape::

    [run]                       # optional
    workers = 2
    split_bytes = 67108864            # cut plain JSON lines, Parquet, Arrow and .warc.gz files larger
                                      # than this into units of about this size, so every
                                      # worker has work (default 64 MB; 0: a unit per file)
    group_bytes = 4194304             # pack files smaller than this, in order, into units
                                      # of about this size (default 4 MB; 0: a unit per file)
    [sources.web]
    paths = ["data/web/*.jsonl.gz"]   # globs, relative to the config file's folder,
                                      # or URIs: "s3://bucket/c4/*.json.gz" (see storage)
    format = "auto"                   # auto | jsonl | parquet | arrow | redpajama-v2 | warc
                                      # (warc: .warc, .warc.gz and WET files; HTML pages
                                      # come with text = "" and the raw page in html)
                                      # (redpajama-v2: paths may name the dataset root, a
                                      # snapshot folder or a listing file)
    minhash = 0.8                     # redpajama-v2 only: read the shipped MinHash bands at
                                      # this threshold (0.7, 0.8, 0.9 or 1.0) as minhash_sim0.8
    [[stages]]
    name = "length"
    min_chars = 100
    sources = ["web"]                 # optional: only these sources
    [stages.per_source.code]          # optional: options that differ for one source
    min_chars = 10
"""

from __future__ import annotations

import dataclasses
import json
import re

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.engine.config_error import ConfigError
from pipeline.engine.config_lines import TableError, header_line, in_table, source_header, stage_header
from pipeline.engine.input_files import not_a_file
from pipeline.engine.option_types import hint_name, matches_hint
from pipeline.engine.source_files import SourceFilesError, source_files
from pipeline.engine.stage_registry import registry
from pipeline.formats.rpv2_layout import ListingError, documents_of
from pipeline.readers import FORMATS, detect_format
from pipeline.readers.redpajama_v2 import THRESHOLDS
from pipeline.stage import GlobalStage
from pipeline.util.numbers import first_beyond_int64, first_non_finite
from pipeline.util.suggest import nearest_hint

# Source names become folder names (docs/<source>, tokens/<source>): a safe charset keeps
# every path a run builds inside --out, whatever the config says.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")

SOURCE_KEYS = {"paths", "format", "text_field", "id_field", "minhash"}
STAGE_KEYS = {"name", "sources", "per_source"}
RUN_KEYS = {"workers", "block_bytes", "max_doc_bytes", "split_bytes", "group_bytes"}
TOP_KEYS = {"run", "sources", "stages"}


@dataclass
class SourceConfig:
    name: str
    patterns: list[str]
    files: list[Path | str]  # local paths, or URIs of files on an object store
    format: str = "auto"
    text_field: str = "text"
    id_field: str = "id"
    minhash: float | None = None  # redpajama-v2: the MinHash threshold whose bands are read


@dataclass
class StageConfig:
    name: str
    options: dict[str, Any]
    sources: list[str] | None  # None: every source
    per_source: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Its place in [[stages]]: a stage repeated with the same options is still a second
    # stage to ``config.stages.index``, which labels it; without it, the repeat's counts
    # went to the first ("dedup#2 saw no documents").
    index: int = 0

    def applies_to(self, source: str) -> bool:
        return self.sources is None or source in self.sources

    def build(self, source: str):
        """The stage object for one source (its per-source options merged in)."""
        cls = registry()[self.name]
        merged = {**self.options, **self.per_source.get(source, {})}
        return cls(cls.Options(**merged))

    def all_options(self) -> list:
        """The stage's options as each source sees them (the shared ones, then each override)."""
        cls = registry()[self.name]
        return [cls.Options(**{**self.options, **extra}) for extra in [{}, *self.per_source.values()]]

    def files(self) -> list[str]:
        """Every file the stage reads besides the documents (its models), sorted."""
        cls = registry()[self.name]
        return sorted({path for options in self.all_options() for path in cls.files(options)})

    def _whole_run_phases(self) -> list:
        """The ``Phases`` of each of the stage's option sets that needs them (none for a
        per-document stage)."""
        cls = registry()[self.name]
        if not issubclass(cls, GlobalStage):
            return []
        return [phases for options in self.all_options() if (phases := cls(options).phases()).whole_run]

    @property
    def is_global(self) -> bool:
        """A global stage whose options, for some source, map over the documents: it cuts
        the chain into segments (``plan_segments``)."""
        return any(phases.map is not None for phases in self._whole_run_phases())

    @property
    def is_prepared(self) -> bool:
        """A global stage whose whole-run phases read no documents (no map): prepared before
        the first segment, it filters in the chain like a per-document stage."""
        phases = self._whole_run_phases()
        return bool(phases) and all(p.map is None for p in phases)


@dataclass
class RunSettings:
    workers: int | None = None
    block_bytes: int = 4 << 20
    max_doc_bytes: int = 32 << 20
    split_bytes: int = 64 << 20  # 0: one unit per file
    group_bytes: int = 4 << 20  # 0: one unit per file


@dataclass
class Config:
    path: Path
    raw: dict[str, Any]
    sources: dict[str, SourceConfig]
    stages: list[StageConfig]
    run: RunSettings

    def canonical(self) -> str:
        """The config as canonical JSON: equal for equal meaning, whatever the formatting.
        ``[run] workers`` is left out: like ``-w``, it changes no output, so a run resumes
        with another count (it was refused as "a different config")."""
        raw = self.raw
        if "workers" in raw.get("run", {}):
            run = {key: value for key, value in raw["run"].items() if key != "workers"}
            raw = {key: value for key, value in raw.items() if key != "run"} | ({"run": run} if run else {})
        return json.dumps(raw, sort_keys=True, separators=(",", ":"), default=str)

    def without_files(self) -> Config:
        """This config without its sources' lists of files, for the tasks a run sends once
        the units name the files: each task carried every input path, so each worker
        unpickled the whole list once per unit (at 4,000 files, 96 KB and 14 ms a task),
        and a run's time grew as the number of files squared."""
        sources = {name: dataclasses.replace(source, files=[]) for name, source in self.sources.items()}
        return dataclasses.replace(self, sources=sources)


def _unknown(kind: str, word: str, valid: typing.Iterable[str]) -> ConfigError:
    valid = sorted(valid)
    return ConfigError(f"unknown {kind} {word!r}{nearest_hint(word, valid)} (valid: {', '.join(valid)})")


def _check_keys(table: dict, allowed: typing.Iterable[str], kind: str) -> None:
    for key in table:
        if key not in allowed:
            raise _unknown(kind, key, allowed)


def load_config(path: str | Path, out: str | Path | None = None) -> Config:
    """The config at ``path``, its sources' files listed. ``out``, the run's output
    folder, is never an input (see ``_not_output``). Every refusal names the config file,
    and the line of the ``[sources.<name>]`` or ``[[stages]]`` table at fault where the
    table is written as one."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config file {path} does not exist")
    if (special := not_a_file(path)) is not None:  # a FIFO would block the read for good
        raise ConfigError(f"config file {path} is {special}")
    try:
        text = path.read_text(encoding="utf-8-sig")  # the BOM a Windows editor writes is no TOML statement
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: not UTF-8 text, as TOML must be (byte offset {error.start})") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid TOML: arrays or tables nested too deeply") from None
    try:
        return _checked(path, raw, out)
    except TableError as error:
        raise ConfigError(f"{path}{header_line(text, error.header)}: {error}") from None
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None


def _checked(path: Path, raw: dict, out: str | Path | None) -> Config:
    if non_finite := first_non_finite(raw):  # TOML's nan and inf pass every range check a stage makes
        raise ConfigError(f"{non_finite} is not a finite number (no option takes nan or inf)")
    if huge := first_beyond_int64(raw):
        raise ConfigError(f"{huge} is beyond the 64-bit integers an option takes")
    _check_keys(raw, TOP_KEYS, "top-level key")
    run = _run_settings(raw.get("run", {}))
    if not isinstance(raw.get("sources", {}), dict) or not isinstance(raw.get("stages", []), list):
        raise ConfigError("[sources.<name>] must be tables and [[stages]] an array of tables")
    sources: dict[str, SourceConfig] = {}
    for name, table in raw.get("sources", {}).items():
        with in_table(source_header(name)):
            sources[name] = _source(_checked_name(name, sources), table, path.parent, out)
    if not sources:
        raise ConfigError("no [sources.<name>] table; a run needs at least one source of documents")
    stages = []
    for i, table in enumerate(raw.get("stages", [])):
        with in_table(stage_header(i)):
            stages.append(_stage(i, table, sources))
    for stage in stages[:-1]:
        with in_table(stage_header(stage.index)):
            if registry()[stage.name].terminal:
                raise ConfigError(f"stage {stage.name!r} writes the final output and must be the last stage")
    return Config(path=path, raw=raw, sources=sources, stages=stages, run=run)


def _run_settings(table: dict) -> RunSettings:
    if not isinstance(table, dict):
        raise ConfigError("[run] must be a table")
    _check_keys(table, RUN_KEYS, "key in [run]")
    settings = RunSettings(**table)
    for name in sorted(RUN_KEYS):
        value = getattr(settings, name)
        if name == "workers" and value is None:
            continue
        least, kind = (0, "non-negative") if name in ("split_bytes", "group_bytes") else (1, "positive")
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ConfigError(f"[run] {name} must be a {kind} integer, not {value!r}")
    return settings


def _checked_name(name: str, earlier: typing.Iterable[str]) -> str:
    """A source name, refused unless it is safe as a folder name on every system: two
    names that differ only in case (``Web``, ``web``) would share their folders on a
    disk that ignores case, as macOS's and Windows' do."""
    if not NAME_PATTERN.fullmatch(name) or ".." in name:
        raise ConfigError(
            f"source name {name!r} is not allowed: use 1-64 letters, digits, '_', '-' or '.', "
            "starting with a letter or digit (it names folders under --out)"
        )
    if same := [other for other in earlier if other.lower() == name.lower()]:
        raise ConfigError(
            f"sources {same[0]!r} and {name!r} differ only in case, so their folders under --out would be one "
            "on a disk that ignores case; rename one"
        )
    return name


def _source(name: str, table: dict, base: Path, out: str | Path | None) -> SourceConfig:
    if not isinstance(table, dict):
        raise ConfigError(f"sources.{name} must be a table with paths = [...]")
    _check_keys(table, SOURCE_KEYS, f"key in [sources.{name}]")
    patterns = table.get("paths")
    if isinstance(patterns, str):
        patterns = [patterns]
    if not patterns or not all(isinstance(p, str) for p in patterns):
        raise ConfigError(f"sources.{name}.paths must be a non-empty list of file globs")
    for key in ("text_field", "id_field", "format"):
        if not isinstance(table.get(key, ""), str):
            raise ConfigError(f"sources.{name}.{key} must be a string, not {table[key]!r}")
    fmt = table.get("format", "auto")
    if fmt != "auto" and fmt not in FORMATS:
        raise _unknown(f"format for sources.{name}", fmt, ("auto", *FORMATS))
    minhash = _minhash(name, table, fmt)
    try:
        named, named_from = patterns, base
        if fmt == "redpajama-v2":  # its documents files, already joined to base
            named, named_from = documents_of(patterns, base), Path()
        unique = source_files(name, named, named_from, out)
    except (OSError, UnicodeDecodeError, ListingError) as error:  # a RedPajama-V2 listing that cannot be read
        raise ConfigError(f"sources.{name}: {error}") from None
    except SourceFilesError as error:
        raise ConfigError(str(error)) from None
    for f in unique:  # a file a dataset folder lists but lacks is the reader's to quarantine
        if fmt == "auto":
            try:
                detect_format(f)
            except ValueError as error:
                if not_a_file(f) is None:  # what is no file is never read, so needs no format
                    raise ConfigError(f"sources.{name}: {error}") from None
    return SourceConfig(
        name=name,
        patterns=list(patterns),
        files=unique,
        format=fmt,
        text_field=table.get("text_field", "text"),
        id_field=table.get("id_field", "id"),
        minhash=minhash,
    )


def _minhash(name: str, table: dict, fmt: str) -> float | None:
    """The source's ``minhash`` threshold: RedPajama-V2 ships bands at four only."""
    if "minhash" not in table:
        return None
    value = table["minhash"]
    if fmt != "redpajama-v2":
        raise ConfigError(f'sources.{name}.minhash is read from RedPajama-V2 trees only: set format = "redpajama-v2"')
    if isinstance(value, bool) or not isinstance(value, (int, float)) or float(value) not in THRESHOLDS:
        raise ConfigError(f"sources.{name}.minhash must be one of {', '.join(map(str, THRESHOLDS))}, not {value!r}")
    return float(value)


def _stage(index: int, table: dict, sources: dict[str, SourceConfig]) -> StageConfig:
    where = f"stages[{index}]"
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table ([[stages]] with name = ...)")
    if "name" not in table:
        raise ConfigError(f"{where} has no name")
    name = table["name"]
    if not isinstance(name, str):
        raise ConfigError(f"{where}: name must be a string, not {name!r}")
    stages = registry()
    if name not in stages:
        raise _unknown(f"stage in {where}", name, stages)
    cls = stages[name]
    where = f"{where} ({name})"
    limited = table.get("sources")
    if limited is not None:
        if not isinstance(limited, list) or not limited or not all(isinstance(s, str) for s in limited):
            raise ConfigError(f"{where}: sources must be a non-empty list of source names (leave it out: every source)")
        for source in limited:
            if source not in sources:
                raise _unknown(f"source in {where}", source, sources)
    per_source = table.get("per_source", {})
    if not isinstance(per_source, dict) or not all(isinstance(v, dict) for v in per_source.values()):
        raise ConfigError(f"{where}: per_source must hold one table per source ([stages.per_source.<source>])")
    for source in per_source:
        if source not in sources:
            raise _unknown(f"source in {where}.per_source", source, sources)
        if limited is not None and source not in limited:  # options that would never be used
            raise ConfigError(f"{where}: per_source.{source} is for a source the stage skips (sources = {limited})")
        # A stage's own key here was "unknown option 'sources'; did you mean 'sources'?"
        if own := sorted(STAGE_KEYS & set(per_source[source])):
            raise ConfigError(
                f"{where}: per_source.{source}.{own[0]}: {own[0]} is the stage's, not an option a source sets"
            )
    options = {k: v for k, v in table.items() if k not in STAGE_KEYS}
    for scope, values in [(where, options)] + [(f"{where}.per_source.{s}", v) for s, v in per_source.items()]:
        _check_options(cls, scope, {**options, **values})
        # An option naming sources (skip_sources, code_sources, ...) with a typo silently
        # judged a source by the wrong rules (code_sources = ["cod"]: every code document
        # dropped by the web rules). A default may name a source the config lacks.
        for key, names in values.items():
            for source in names if key.endswith("_sources") and isinstance(names, list) else ():
                if source not in sources:
                    raise _unknown(f"source in {scope}.{key}", source, sources)
    return StageConfig(name=name, options=options, sources=limited, per_source=per_source, index=index)


def _check_options(cls, where: str, values: dict[str, Any]) -> None:
    fields = {f.name: f for f in dataclasses.fields(cls.Options)}
    hints = typing.get_type_hints(cls.Options)
    for key, value in values.items():
        if key not in fields:
            raise _unknown(f"option in {where}", key, list(fields) + sorted(STAGE_KEYS))
        if not matches_hint(value, hints[key]):
            raise ConfigError(f"{where}: {key} = {value!r} is not a valid {hint_name(hints[key])}")
    try:
        cls.Options(**values)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{where}: {error}") from None

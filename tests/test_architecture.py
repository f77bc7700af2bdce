"""The map in ARCHITECTURE.md, checked against the code's own imports: no circle, each
room imports only the rooms below it, click only in the commands, and no module grown
past what a reader takes in at once."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

# Which rooms each room may import (besides itself and the root ``pipeline`` package, which
# holds only the version). Bottom to top; ARCHITECTURE.md draws the same picture.
MAY_IMPORT = {
    # pipeline/__init__.py: clears numba caches compiled against changed code before any loads
    "root": {"compile", "util"},
    "util": set(),
    "compile": {"util"},  # jit, numba's cache and its clean-up, warm-up steps, fork-server preload
    "kernels": {"compile", "util"},
    "formats": {"kernels", "compile", "util"},
    # tokenizers, BPE kernels, document framing, case folding, character classes
    "text": {"formats", "kernels", "compile", "util"},
    "contract": {"formats", "util"},  # pipeline/stage.py, phases.py: what every stage is written against
    # pipeline/sidefiles.py: what stages read besides the documents (eval sets, lists), and
    # the file-name rule the readers share
    "sidefiles": set(),
    "readers": {"sidefiles", "formats", "kernels", "compile", "util"},
    "stages": {"contract", "sidefiles", "text", "formats", "kernels", "compile", "util"},
    "loader": {"formats", "kernels", "compile", "util"},
    "mix": {"loader", "formats", "kernels", "compile", "util"},
    "report": {"mix", "formats", "kernels", "compile", "util"},
    "classifier": {"readers", "formats", "kernels", "compile", "util"},  # prep classifier train/eval
    # prep ablate: trains through the loader, evaluates text read by the readers and framed
    # as the tokenize stage frames it (text/framing.py), projects with prep estimate's formula.
    "ablate": {"loader", "mix", "readers", "text", "formats", "kernels", "compile", "util"},
    # prep mix search: makes mixtures as prep mix does and trains them as prep ablate does.
    "mixsearch": {"ablate", "mix", "loader", "formats", "kernels", "compile", "util"},
    "engine": {"contract", "readers", "formats", "kernels", "compile", "util"},
    "commands": {
        "mixsearch",
        "ablate",
        "engine",
        "report",
        "mix",
        "classifier",
        "loader",
        "readers",
        "contract",
        "sidefiles",
        "text",
        "formats",
        "kernels",
        "compile",
        "util",
    },
    "entry": {"commands"},  # pipeline/__main__.py
}

# Generated tables are data, not code to read.
LONG_ALLOWED = {"pipeline/text/char_tables_data.py"}
MAX_LINES = 400


def _modules(root: Path) -> dict[str, Path]:
    files = {}
    for path in [*root.glob("pipeline/**/*.py"), *root.glob("stages/**/*.py")]:
        files[".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")] = path
    return files


def _module_imports(root: Path) -> dict[str, set[str]]:
    """Each module of pipeline/ and stages/ and the modules of those packages it imports
    (imports inside functions included: a lazy import is still a dependency)."""
    files = _modules(root)
    graph = {}
    for name, path in files.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in files]
                targets = subs if len(subs) == len(node.names) else [node.module, *subs]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            deps.update(t for t in targets if t in files and t != name)
        graph[name] = deps
    return graph


def _room(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "stages":
        return "stages"
    if module in ("pipeline.stage", "pipeline.phases"):
        return "contract"
    if module == "pipeline.__main__":
        return "entry"
    return parts[1] if len(parts) > 1 else "root"


def test_the_imports_have_no_circle():
    graph = _module_imports(REPO)
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for dep in sorted(graph[module]):
            if state.get(dep) == 1:
                raise AssertionError("import circle: " + " -> ".join(path[path.index(dep) :] + [module, dep]))
            if dep not in state:
                visit(dep, path + [module])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])


def test_every_module_is_in_a_room_of_the_map():
    rooms = {_room(m) for m in _modules(REPO)}
    assert rooms <= set(MAY_IMPORT), rooms - set(MAY_IMPORT)


def test_each_room_imports_only_the_rooms_below_it():
    wrong = []
    for module, deps in sorted(_module_imports(REPO).items()):
        room = _room(module)
        for dep in sorted(deps):
            if _room(dep) not in MAY_IMPORT[room] | {room, "root"}:
                wrong.append(f"{module} ({room}) imports {dep} ({_room(dep)})")
    assert not wrong, "\n".join(wrong)


def _importers_of(package: str, name: str | None = None) -> set[str]:
    """The modules that import ``package`` (at the top or inside a function), or with
    ``name``, that import that name from it."""
    found = set()
    for module, path in _modules(REPO).items():
        for node in ast.walk(ast.parse(path.read_text())):
            if name is not None:
                if isinstance(node, ast.ImportFrom) and node.module == package:
                    found.update(module for a in node.names if a.name == name)
                continue
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any(n == package or n.startswith(package + ".") for n in names):
                found.add(module)
    return found


def test_only_the_commands_speak_click():
    assert {module for module in _importers_of("click") if _room(module) != "commands"} == set()


# torch is an optional extra (the loader's, prep ablate's): only these modules import it:
# the loader's torch side (dataset, dataloader, its shared ring) and the ablate trainer.
TORCH_IMPORTERS = {
    "pipeline.loader.dataset",
    "pipeline.loader.dataloader",
    "pipeline.loader.ring",
    "pipeline.ablate.model",
    "pipeline.ablate.trial",
    "pipeline.commands.ablate",  # inside the command, to say how to install it when missing
    "pipeline.commands.mix_search",  # the same
}


def test_only_the_loader_and_ablate_import_torch():
    assert _importers_of("torch") <= TORCH_IMPORTERS


def test_every_kernel_lives_where_the_cache_guard_looks():
    """numba_cache hashes only KERNEL_FOLDERS to decide when cached kernels are stale."""
    from pipeline.compile.numba_cache import KERNEL_FOLDERS

    compiles = _importers_of("numba") | _importers_of("pipeline.compile.jit", "njit")
    paths = {str(_modules(REPO)[module].relative_to(REPO)) for module in compiles}
    assert paths and {path for path in paths if not path.startswith(KERNEL_FOLDERS)} == set()


def test_no_module_is_longer_than_a_reader_takes_in():
    long = [
        f"{p.relative_to(REPO)}: {n} lines"
        for p in _modules(REPO).values()
        if (n := len(p.read_text().splitlines())) > MAX_LINES and str(p.relative_to(REPO)) not in LONG_ALLOWED
    ]
    assert not long, long


# Files the check flags that join no path of a folder prep writes or reads.
JOINS_ALLOWED = {
    "stages/dedup/rounds.py",  # names a round's work-file family (cc/step<k>) for formats/work_files.PerIndex
    "stages/dedup/warmup.py",  # the compile rehearsal's own temporary folder, no run folder
    "pipeline/text/tokenizers.py",  # a tokenizer's display name ("<folder>/tokenizer.json"), no path
}


def _is_text(node: ast.AST) -> bool:
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))


def _builds_a_path(node: ast.JoinedStr) -> bool:
    """An f-string that puts a ``/`` beside a value and has no spaces or markup in its
    text (``f"{folder}/{name}.json"``): a message (``"units {a}/{b}"``), a piece of HTML
    or a URI's ``scheme://`` is no path."""
    text = [part.value for part in node.values if isinstance(part, ast.Constant)]
    if any(c.isspace() or c in "<>" for piece in text for c in piece):
        return False
    parts = node.values
    for i, part in enumerate(parts):
        if isinstance(part, ast.Constant) and "/" in part.value.replace("://", ""):
            if any(0 <= j < len(parts) and isinstance(parts[j], ast.FormattedValue) for j in (i - 1, i + 1)):
                return True
    return False


def _path_joins(tree: ast.AST) -> list[int]:
    """The lines that join a path from a written name: ``path / "name"`` (or an f-string),
    ``os.path.join``, ``joinpath``, and f-strings that build a path."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            joined = _is_text(node.left) or _is_text(node.right)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = ast.unparse(node.func.value)
            joined = node.func.attr == "joinpath" or (node.func.attr == "join" and owner in ("os.path", "posixpath"))
        else:
            joined = isinstance(node, ast.JoinedStr) and _builds_a_path(node)
        if joined:
            lines.append(node.lineno)
    return sorted(set(lines))


def test_paths_are_joined_only_in_the_formats():
    """ARCHITECTURE.md: every path of a folder prep writes or reads comes from its format
    (``Layout`` for a run folder). The rooms below ``formats/`` (which it imports, so they
    cannot take a path from it) hold no folder's layout and are not read."""
    below = MAY_IMPORT["formats"] | {"root", "formats"}
    joins = []
    for module, path in sorted(_modules(REPO).items()):
        name = path.relative_to(REPO).as_posix()
        if _room(module) in below or name in JOINS_ALLOWED:
            continue
        lines = path.read_text().splitlines()
        joins += [f"{name}:{n}: {lines[n - 1].strip()}" for n in _path_joins(ast.parse(path.read_text()))]
    assert not joins, "\n".join(joins)


def test_the_path_join_check_sees_each_kind_of_join():
    joins = _path_joins(
        ast.parse(
            'a = out / "docs"\nb = out / f"{unit}.json"\nc = os.path.join(out, name)\n'
            'd = Path(out).joinpath(name)\ne = f"{base}/{rel}"\n'
            'f = f"units {done}/{total}"\ng = f"<td>{cell}</td>"\nh = f"{scheme}://{key}"\ni = size / 2\n'
        )
    )
    assert joins == [1, 2, 3, 4, 5]


def _public(cls: type) -> set[str]:
    return {name for name in vars(cls) if not name.startswith("_")}


def test_the_contract_has_the_hooks_the_map_counts():
    """ARCHITECTURE.md counts what a stage implements: a per-document stage's 9 hooks, and
    the 2 a global stage adds (``phases``, ``bind``), beside the helpers it is given
    (``partitions``, ``UNSIZED_PARTITIONS``). A new hook is a change to the map."""
    from pipeline.stage import GlobalStage, Stage

    assert _public(Stage) == {
        "name",
        "Options",
        "process",
        "files",
        "added_columns",
        "version",
        "terminal",
        "open_unit",
        "close_unit",
    }
    assert _public(GlobalStage) - {"partitions", "UNSIZED_PARTITIONS"} == {"phases", "bind"}

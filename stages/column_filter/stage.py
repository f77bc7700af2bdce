"""``column_filter``: the stage, its options and its decisions (see the package's docstring)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.stage import Stage, StageOutput, register
from stages.column_filter.evaluate import BatchColumns, ColumnTypeError, detail, evaluate
from stages.column_filter.grammar import columns, parse

MISSING = ("keep", "drop")
RULE_KEYS = ("expr", "missing")
DUPLICATE = "duplicate"  # the reason of drop_duplicates, so no rule may take the name
IS_DUPLICATE = "is_duplicate"
_RULE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")


@dataclass(frozen=True)
class Rule:
    """One rule as the stage runs it: what it keeps, and what an undecided row gets."""

    name: str
    text: str
    tree: object
    keep_missing: bool
    columns: tuple[str, ...]


def rules_of(options: ColumnFilter.Options) -> list[Rule]:
    """The options' rules, parsed, in the order of their names (see the package's
    docstring: a TOML table has no order); ValueError naming the rule."""
    rules = []
    for name, spec in sorted(options.rules.items()):
        if not _RULE_NAME.fullmatch(name):
            raise ValueError(f"rule name {name!r}: use letters, digits, '_', '.' and '-' (it becomes the reason)")
        if name == DUPLICATE:
            raise ValueError(f"rule name {DUPLICATE!r} is the reason drop_duplicates gives; name the rule otherwise")
        table = {"expr": spec} if isinstance(spec, str) else spec
        unknown = sorted(set(table) - set(RULE_KEYS))
        if unknown:
            raise ValueError(f"rule {name!r}: unknown key {unknown[0]!r} (valid: {', '.join(RULE_KEYS)})")
        text, missing = table.get("expr"), table.get("missing", options.missing)
        if not isinstance(text, str):
            raise ValueError(f'rule {name!r}: expr must be a string, as in {name} = "x >= 1"')
        if missing not in MISSING:
            raise ValueError(f"rule {name!r}: missing must be 'keep' or 'drop', not {missing!r}")
        try:
            tree = parse(text)
        except ValueError as error:
            raise ValueError(f"rule {name!r}: {error}") from None
        rules.append(Rule(name, text, tree, missing == "keep", tuple(columns(tree))))
    return rules


@register
class ColumnFilter(Stage):
    name = "column_filter"

    @dataclass
    class Options:
        # name -> what to keep ("50 <= rps_doc_word_count <= 100000"), or a table
        # {expr = "...", missing = "drop"}; checked in the order of their names.
        rules: dict[str, str | dict[str, str]] = field(default_factory=dict)
        missing: str = "keep"  # what a row gets whose rule cannot be decided (a null or absent column)
        drop_duplicates: bool = False  # drop rows whose bool column is_duplicate is true

        def __post_init__(self) -> None:
            if self.missing not in MISSING:
                raise ValueError(f"missing must be 'keep' or 'drop', not {self.missing!r}")
            if not self.rules and not self.drop_duplicates:
                raise ValueError("no rules and drop_duplicates = false: the stage would keep every document")
            rules_of(self)

    def __init__(self, options: ColumnFilter.Options):
        super().__init__(options)
        self.rules = rules_of(options)
        self.reasons = pa.array([None, f"{self.name}:{DUPLICATE}", *(f"{self.name}:{r.name}" for r in self.rules)])

    def process(self, batch: pa.RecordBatch, source: str) -> StageOutput:
        """Each row's reason is the first check it fails: the duplicate flag, then the rules
        by name. Codes as the quality stage's Decider: 0 keeps, k names reason k."""
        n = batch.num_rows
        table = BatchColumns(batch)
        code = np.zeros(n, np.int64)
        details = pa.nulls(n, pa.string())
        counters: dict[str, int] = {}
        if self.options.drop_duplicates:
            if table.raw(IS_DUPLICATE) is None:
                counters[f"{self.name}.{DUPLICATE}.missing"] = n
            flagged = _numpy(pc.fill_null(table.boolean(IS_DUPLICATE), False))
            code[flagged] = 1
            details = _put(details, flagged, pa.repeat(pa.scalar(f"{IS_DUPLICATE}=true"), int(flagged.sum())))
        for index, rule in enumerate(self.rules, start=2):
            try:
                answer = evaluate(rule.tree, table)
            except ColumnTypeError as error:
                raise ColumnTypeError(f"{self.name}: rule {rule.name!r} ({rule.text}): {error}") from None
            open_rows = code == 0
            undecided = int((_numpy(pc.is_null(answer)) & open_rows).sum())
            if undecided:
                counters[f"{self.name}.{rule.name}.missing"] = undecided
            fails = ~_numpy(pc.fill_null(answer, rule.keep_missing)) & open_rows
            if fails.any():
                code[fails] = index
                rows = pa.array(np.flatnonzero(fails))
                details = _put(details, fails, detail(list(rule.columns), table, rows))
        reasons = self.reasons.take(pa.array(code))
        return StageOutput(batch=batch, drop_reason=reasons, counters=counters, detail=details)


def _numpy(mask: pa.Array) -> np.ndarray:
    return mask.to_numpy(zero_copy_only=False).astype(bool, copy=False)


def _put(values: pa.Array, mask: np.ndarray, replacements: pa.Array) -> pa.Array:
    """``values`` with the rows where ``mask`` holds replaced, in order, by ``replacements``."""
    if not mask.any():
        return values
    return pc.replace_with_mask(values, pa.array(mask), replacements)

"""A parsed rule evaluated over a batch's whole columns with pyarrow.compute: one kernel
call per node of the rule, never a Python object per document.

Numbers are float64. Null is "not known", and it travels: an arithmetic with a null
operand is null, and so is one without a number for an answer (``x / 0``, ``inf - inf``:
Arrow's division would give inf or NaN, which then compare as if they were values); a
stored NaN is read as null (a signal that was not computed). Comparisons of a null are
null; ``and``/``or``/``not`` follow Kleene's three-valued logic (``null or true`` is
true, ``null and false`` false), so a row is undecided only where the rule's answer
really depends on a value it lacks. The stage's ``missing`` decides those rows.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from stages.column_filter.grammar import Arithmetic, Column, Compare, Logic, Negate, Not, Number
from stages.url_filter.urls import column_at

FLOAT = pa.float64()
_NULL_FLOAT = pa.scalar(None, FLOAT)
_ARITHMETIC = {"+": pc.add, "-": pc.subtract, "*": pc.multiply}
_COMPARE = {
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
    "==": pc.equal,
    "!=": pc.not_equal,
}


class ColumnTypeError(ValueError):
    """A rule reads a column whose type it cannot use (text where a number is wanted)."""


class BatchColumns:
    """The columns of one batch as a rule reads them, by name (a dotted name reaches into
    struct fields: ``metadata.score``); an absent column is null in every row."""

    def __init__(self, batch: pa.RecordBatch):
        self.batch = batch
        self.n = batch.num_rows

    def raw(self, name: str) -> pa.Array | None:
        """The column as stored, or None when the batch has no such column."""
        return column_at(self.batch, name)

    def number(self, name: str) -> pa.Array:
        array = self.raw(name)
        if array is None or pa.types.is_null(array.type):
            return pa.nulls(self.n, FLOAT)
        if not (pa.types.is_integer(array.type) or pa.types.is_floating(array.type) or pa.types.is_decimal(array.type)):
            raise ColumnTypeError(f"column {name!r} is {array.type}, not a number")
        # safe=False: an integer past 2**53 (a uint64 id) rounds to the nearest float64,
        # as "evaluated in float64" says, rather than stopping the run.
        return _no_nan(array.cast(FLOAT, safe=False))

    def boolean(self, name: str) -> pa.Array:
        array = self.raw(name)
        if array is None or pa.types.is_null(array.type):
            return pa.nulls(self.n, pa.bool_())
        if not pa.types.is_boolean(array.type):
            raise ColumnTypeError(f"column {name!r} is {array.type}, not a boolean (compare it: {name} > 0)")
        return array


def evaluate(node: object, columns: BatchColumns) -> pa.Array:
    """The rule's answer for every row of the batch: a bool array, null where unknown."""
    result = _value(node, columns)
    if isinstance(result, pa.Scalar):  # a rule of constants only
        return pa.repeat(result, columns.n)
    return result


def _value(node: object, columns: BatchColumns) -> pa.Array | pa.Scalar:
    if isinstance(node, Number):
        return pa.scalar(node.value, FLOAT)
    if isinstance(node, Column):
        return columns.boolean(node.name) if node.boolean else columns.number(node.name)
    if isinstance(node, Negate):
        return pc.negate(_value(node.operand, columns))
    if isinstance(node, Arithmetic):
        left, right = _value(node.left, columns), _value(node.right, columns)
        if node.op == "/":
            return _no_nan(pc.if_else(pc.equal(right, 0.0), _NULL_FLOAT, pc.divide(left, right)))
        return _no_nan(_ARITHMETIC[node.op](left, right))
    if isinstance(node, Compare):
        values = [_value(operand, columns) for operand in node.operands]
        result = None
        for op, left, right in zip(node.ops, values, values[1:]):
            holds = _COMPARE[op](left, right)
            result = holds if result is None else pc.and_kleene(result, holds)
        return result
    if isinstance(node, Not):
        return pc.invert(_value(node.operand, columns))
    if isinstance(node, Logic):
        combine = pc.and_kleene if node.op == "and" else pc.or_kleene
        result = _value(node.operands[0], columns)
        for operand in node.operands[1:]:
            result = combine(result, _value(operand, columns))
        return result
    raise TypeError(f"not a rule node: {node!r}")


def _no_nan(values: pa.Array | pa.Scalar) -> pa.Array | pa.Scalar:
    """``values`` with NaN read as null: no number is not a number to compare."""
    return pc.if_else(pc.is_nan(values), _NULL_FLOAT, values)


def detail(names: list[str], columns: BatchColumns, rows: pa.Array) -> pa.Array:
    """For the rows at indices ``rows``, the values of the columns a rule read, as the
    ledger shows them: ``rps_doc_word_count=12 ccnet_nlines=3`` (``=null`` for a null
    value, ``=absent`` where the batch has no such column)."""
    if not names:  # a rule of constants only
        return pa.nulls(len(rows), pa.string())
    parts = []
    for name in names:
        array = columns.raw(name)
        if array is None:
            parts.append(pa.scalar(f"{name}=absent"))
            continue
        values = array.take(rows)
        if pa.types.is_floating(values.type):  # as compared: a float32 0.1 is 0.10000000149011612
            values = values.cast(FLOAT)
        shown = pc.fill_null(values.cast(pa.string()), "null")
        parts.append(pc.binary_join_element_wise(f"{name}=", shown, ""))
    joined = pc.binary_join_element_wise(*parts, " ")
    if isinstance(joined, pa.Scalar):  # every column absent
        return pa.repeat(joined, len(rows))
    return joined

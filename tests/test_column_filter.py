"""``column_filter``: rules over numeric columns, parsed by its own grammar (never eval),
evaluated on whole columns with three-valued logic, and the same rules on any input that
carries numbers (RedPajama-V2's signals, Dolma's attributes, FineWeb's metadata)."""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO, write_config, write_jsonl
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.engine.config import ConfigError, load_config
from pipeline.engine.run import run_pipeline
from stages.column_filter.evaluate import ColumnTypeError
from stages.column_filter.grammar import Arithmetic, Column, Compare, Logic, Negate, Not, Number, parse
from stages.column_filter.stage import ColumnFilter

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def a(name: str) -> Column:
    return Column(name, boolean=False)


def b(name: str) -> Column:
    return Column(name, boolean=True)


def test_precedence_or_below_and_below_not_below_comparison_below_arithmetic():
    assert parse("x or y and not z") == Logic("or", (b("x"), Logic("and", (b("y"), Not(b("z"))))))
    assert parse("1 + 2 * x == -y / 4") == Compare(
        ("==",),
        (
            Arithmetic("+", Number(1.0), Arithmetic("*", Number(2.0), a("x"))),
            Arithmetic("/", Negate(a("y")), Number(4.0)),
        ),
    )
    assert parse("not x > 1 and y") == Logic("and", (Not(Compare((">",), (a("x"), Number(1.0)))), b("y")))
    assert parse("(x or y) and z") == Logic("and", (Logic("or", (b("x"), b("y"))), b("z")))
    left_to_right = Arithmetic("-", Arithmetic("-", a("a"), a("b")), a("c"))
    assert parse("a - b - c > 0") == Compare((">",), (left_to_right, Number(0.0)))


def test_chained_comparisons_numbers_and_dotted_names():
    assert parse("50 <= rps_doc_word_count <= 1e5") == Compare(
        ("<=", "<="), (Number(50.0), a("rps_doc_word_count"), Number(100000.0))
    )
    assert parse("0.5 < meta.score != .25E-1") == Compare(("<", "!="), (Number(0.5), a("meta.score"), Number(0.025)))
    assert parse("minhash_sim0.8 >= 3") == Compare((">=",), (a("minhash_sim0.8"), Number(3.0)))


@pytest.mark.parametrize(
    "text, message, position",
    [
        ("(x > 1", "unbalanced '('", 0),
        ("x > 1)", "unbalanced ')'", 5),
        ("x > 1 and (y < 2 or (z == 3)", "unbalanced '('", 10),
        ("x # 1", "unknown character '#'", 2),
        ("x = 1", "unknown character '=' (equality is ==)", 2),
        ("x > 1 && y", "unknown character '&' (use and)", 6),
        ("x > 1; import os", "unknown character ';'", 5),
        ("__import__('os')", 'unknown character "\'"', 11),
        ("", "empty rule", 0),
        ("x >", "the rule ends where a value is wanted", 3),
        ("x > 1 y", "unexpected name 'y'", 6),
        ("3", "a number where a condition is wanted", 0),
        ("x > 1 and y + 1", "a number where a condition is wanted", 10),
        ("(x < 1) + 2 > 0", "a condition where a number is wanted", 0),
        ("x and or y", "'or' where a value is wanted", 6),
    ],
)
def test_syntax_errors_name_the_position(text, message, position):
    with pytest.raises(ValueError) as error:
        parse(text)
    assert message in str(error.value) and f"at position {position}:" in str(error.value)
    assert error.value.position == position


def judge(rows: dict[str, list], **options) -> tuple[list, list, dict]:
    """(reasons, details, counters) of the stage over a batch of these columns."""
    n = len(next(iter(rows.values())))
    batch = pa.RecordBatch.from_pydict({"id": [str(i) for i in range(n)], "text": ["t"] * n, **rows})
    out = ColumnFilter(ColumnFilter.Options(**options)).process(batch, "web")
    assert out.batch is batch  # no column added, no text changed
    return out.drop_reason.to_pylist(), out.detail.to_pylist(), out.counters


def test_a_rule_keeps_what_it_says_and_names_the_values_it_read():
    reasons, details, counters = judge(
        {"words": [12, 60, 200_000, 70], "bullets": [0.0, 9.0, 0.0, 1.0], "lines": [4.0, 10.0, 8.0, 1.0]},
        rules={"word_count": "50 <= words <= 100000", "bullets": "bullets / lines <= 0.9"},
    )
    assert reasons == ["column_filter:word_count", None, "column_filter:word_count", "column_filter:bullets"]
    assert details == ["words=12", None, "words=200000", "bullets=1 lines=1"]
    assert counters == {}


def test_nulls_follow_three_valued_logic_and_missing_decides_the_rest():
    rows = {"x": [None, None, 5.0, float("nan")], "y": [0.0, 2.0, None, 2.0]}
    rule = "x > 3 or y < 1"  # row 0: null or true = true; row 1: null or false = null
    assert judge(rows, rules={"r": rule})[0] == [None, None, None, None]
    reasons, details, counters = judge(rows, rules={"r": rule}, missing="drop")
    assert reasons == [None, "column_filter:r", None, "column_filter:r"]
    assert details[1] == "x=null y=2" and details[3] == "x=nan y=2"  # a stored NaN is unknown, shown as stored
    assert counters == {"column_filter.r.missing": 2}
    per_rule = judge(rows, rules={"r": {"expr": "x > 3 and y >= 0", "missing": "drop"}, "s": "y > 100"})
    # r: row 0 null and true = null -> dropped by r; row 2: true and null -> dropped by r; s decides the rest
    assert per_rule[0] == ["column_filter:r", "column_filter:r", "column_filter:r", "column_filter:r"]


def test_division_by_zero_is_unknown_not_infinity():
    rows = {"a": [1.0, 0.0, -1.0, 4.0], "b": [0.0, 0.0, -0.0, 2.0]}
    # as inf, 1 / 0 and -1 / -0 would fail "< 1e300" (and 0 / 0, NaN, would fail any comparison)
    assert judge(rows, rules={"r": "a / b < 1e300"})[0] == [None, None, None, None]
    assert judge(rows, rules={"r": "a / b < 1e300"}, missing="drop")[0] == ["column_filter:r"] * 3 + [None]
    assert judge(rows, rules={"r": "a / b > -1e300"}, missing="drop")[2] == {"column_filter.r.missing": 3}


def test_an_absent_column_is_missing_in_every_row_and_counted():
    rows = {"x": [1.0, 10.0]}
    reasons, details, counters = judge(rows, rules={"r": "x < 5 and nowhere > 1"})
    assert reasons == [None, "column_filter:r"]  # row 1: false and null = false
    assert details == [None, "x=10 nowhere=absent"]
    assert counters == {"column_filter.r.missing": 1}
    assert judge(rows, rules={"r": "nowhere > 1"}, missing="drop")[2] == {"column_filter.r.missing": 2}


def test_rules_run_by_name_and_the_first_failure_names_the_reason():
    """By name, whatever the order written: the run's fingerprint sorts a table's keys."""
    rows = {"x": [1.0, 1.0, 9.0], "y": [None, 5.0, 5.0]}
    for rules in ({"b": "y < 3", "a": "x > 2"}, {"a": "x > 2", "b": "y < 3"}):
        reasons, _, counters = judge(rows, rules=rules, missing="drop")
        assert reasons == ["column_filter:a", "column_filter:a", "column_filter:b"]
        assert counters == {}  # the row with a null y never reached "b"


def test_bool_columns_integers_and_struct_fields():
    struct = pa.array([{"score": 0.9}, {"score": 0.1}, None], pa.struct([("score", pa.float64())]))
    rows = {"flag": [True, False, None], "count": pa.array([3, 3, 1], pa.int32()), "metadata": struct}
    reasons, details, _ = judge(rows, rules={"r": "not flag and count >= 2 or metadata.score > 0.5"})
    # row 2: (not null and false) or null = false or null = null -> kept under missing = "keep"
    assert reasons == [None, None, None]
    reasons, details, _ = judge(rows, rules={"r": "not flag and count >= 2 or metadata.score > 0.5"}, missing="drop")
    assert reasons == [None, None, "column_filter:r"] and details[2] == "flag=null count=1 metadata.score=null"


def test_a_float32_column_is_compared_and_shown_as_the_value_it_holds():
    reasons, details, _ = judge({"g": pa.array([0.1, 0.0625], pa.float32())}, rules={"r": "g <= 0.1"})
    assert reasons == ["column_filter:r", None] and details[0] == "g=0.10000000149011612"


def test_integers_past_float64s_precision_round_rather_than_stop_the_run():
    ids = pa.array([2**63 + 1, 5], pa.uint64())  # RedPajama-V2's id_int is a uint64
    assert judge({"id_int": ids}, rules={"r": "id_int > 1e18"})[0] == [None, "column_filter:r"]


def test_a_column_of_the_wrong_type_names_itself_and_its_type():
    with pytest.raises(ColumnTypeError, match=r"column_filter: rule 'r' \(lang > 1\): column 'lang' is string, not a"):
        judge({"lang": ["en", "de"]}, rules={"r": "lang > 1"})
    with pytest.raises(ColumnTypeError, match="column 'n' is int64, not a boolean"):
        judge({"n": [1, 2]}, rules={"r": "not n"})
    with pytest.raises(ColumnTypeError, match="column 'flag' is bool, not a number"):
        judge({"flag": [True, False]}, rules={"r": "flag + 1 > 1"})


def test_drop_duplicates_drops_the_flagged_rows_and_null_is_not_a_duplicate():
    rows = {"is_duplicate": [False, True, None, True], "x": [1.0, 1.0, 1.0, 0.0]}
    reasons, details, counters = judge(rows, drop_duplicates=True, rules={"r": "x > 0.5"})
    assert reasons == [None, "column_filter:duplicate", None, "column_filter:duplicate"]
    assert details[1] == "is_duplicate=true"
    assert judge({"x": [1.0, 2.0]}, drop_duplicates=True)[2] == {"column_filter.duplicate.missing": 2}
    with pytest.raises(ColumnTypeError, match="is_duplicate"):
        judge({"is_duplicate": [0, 1]}, drop_duplicates=True)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"rules": {"r": "x >"}}, "rule 'r': the rule ends where a value is wanted at position 3"),
        ({"rules": {"r": {"expr": "x > 1", "missng": "drop"}}}, "rule 'r': unknown key 'missng'"),
        ({"rules": {"r": {"missing": "drop"}}}, "rule 'r': expr must be a string"),
        ({"rules": {"r": "x > 1"}, "missing": "maybe"}, "missing must be 'keep' or 'drop'"),
        ({"rules": {"r": {"expr": "x > 1", "missing": "yes"}}}, "rule 'r': missing must be"),
        ({"rules": {"duplicate": "x > 1"}}, "drop_duplicates"),
        ({"rules": {"two words": "x > 1"}}, "rule name 'two words'"),
        ({}, "would keep every document"),
        # Deep trees once stopped the run with a bare RecursionError.
        (
            {"rules": {"r": "(" * 3000 + "x" + ")" * 3000 + " > 1"}},
            "rule 'r': parentheses nest deeper than 64 levels at position 64",
        ),
        ({"rules": {"r": "x" + " + x" * 5000 + " > 1"}}, "rule 'r': the rule nests deeper than 64"),
        ({"rules": {"r": "not " * 3000 + "x > 1"}}, "rule 'r': the rule nests deeper than 64"),
        ({"rules": {"r": "-" * 3000 + "x > 1"}}, "rule 'r': the rule nests deeper than 64"),
    ],
)
def test_bad_options_are_errors_naming_the_rule(options, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        ColumnFilter.Options(**options)


# A random rule as text and as a plain-Python function of the same rows, built apart from
# the stage's parser and evaluator: they must keep the same rows.
COLUMNS = ("c0", "c1", "c2")
LITERALS = st.sampled_from([0.0, 1.0, 2.0, -1.5, 0.25, 10.0, 1e-3])
# Nulls, NaN (unknown too), infinities (inf - inf has no answer), zeros and plain numbers.
SPECIAL = st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, 2.0, -3.0])
VALUES = st.one_of(st.none(), SPECIAL, st.floats(-100, 100))


def _numeric(depth: int):
    column = st.sampled_from(COLUMNS).map(lambda c: (c, lambda row, c=c: _known(row[c])))
    leaf = st.one_of(LITERALS.map(lambda v: (repr(v), lambda row, v=v: v)), column, column)
    if depth == 0:
        return leaf
    sub = _numeric(depth - 1)
    negate = sub.map(lambda x: (f"-({x[0]})", lambda row, f=x[1]: _arith("neg", f(row), None)))
    binary = st.tuples(st.sampled_from("+-*/"), sub, sub).map(
        lambda t: (f"({t[1][0]} {t[0]} {t[2][0]})", lambda row, t=t: _arith(t[0], t[1][1](row), t[2][1](row)))
    )
    return st.one_of(leaf, negate, binary, binary)  # arithmetic (x / 0 above all) drawn often


def _boolean(depth: int):
    ops = st.sampled_from(["<", "<=", ">", ">=", "==", "!="])
    compare = st.tuples(_numeric(2), st.lists(st.tuples(ops, _numeric(2)), min_size=1, max_size=2)).map(_chain)
    if depth == 0:
        return compare
    sub = _boolean(depth - 1)
    negate = sub.map(lambda x: (f"not ({x[0]})", lambda row, f=x[1]: None if f(row) is None else not f(row)))
    logic = st.tuples(st.sampled_from(["and", "or"]), sub, sub).map(
        lambda t: (f"({t[1][0]}) {t[0]} ({t[2][0]})", lambda row, t=t: _kleene(t[0], t[1][1](row), t[2][1](row)))
    )
    return st.one_of(compare, negate, logic)


def _known(value):
    return None if value is None or math.isnan(value) else value


def _arith(op, left, right):
    if left is None or (op != "neg" and right is None):
        return None
    if op == "/" and right == 0:
        return None
    value = {"neg": lambda: -left, "+": lambda: left + right, "-": lambda: left - right, "*": lambda: left * right}.get(
        op, lambda: left / right
    )()
    return None if math.isnan(value) else value


def _chain(parts):
    (first_text, first), rest = parts
    text = first_text + "".join(f" {op} {operand_text}" for op, (operand_text, _) in rest)

    def value(row):
        operands = [first(row)] + [f(row) for _, (_, f) in rest]
        answers = []
        for (op, _), left, right in zip(rest, operands, operands[1:]):
            if left is None or right is None:
                answers.append(None)
            else:
                answers.append(
                    {"<": left < right, "<=": left <= right, ">": left > right, ">=": left >= right}.get(
                        op, left == right if op == "==" else left != right
                    )
                )
        result = answers[0]
        for answer in answers[1:]:
            result = _kleene("and", result, answer)
        return result

    return text, value


def _kleene(op, left, right):
    if op == "and":
        return False if left is False or right is False else None if None in (left, right) else True
    return True if left is True or right is True else None if None in (left, right) else False


@settings(max_examples=300, deadline=None)
@given(
    rule=_boolean(2),
    rows=st.lists(st.tuples(VALUES, VALUES, VALUES), min_size=1, max_size=12),
    missing=st.sampled_from(["keep", "drop"]),
)
def test_the_kept_rows_are_what_plain_python_keeps(rule, rows, missing):
    text, python = rule
    columns = {c: [row[i] for row in rows] for i, c in enumerate(COLUMNS)}
    reasons = judge({c: pa.array(v, pa.float64()) for c, v in columns.items()}, rules={"r": text}, missing=missing)[0]
    expected = []
    for row in rows:
        answer = python(dict(zip(COLUMNS, row)))
        expected.append(answer if answer is not None else missing == "keep")
    assert [reason is None for reason in reasons] == expected, text


def test_a_run_filters_any_input_that_carries_numbers(tmp_path):
    """Dolma-style top-level attributes and FineWeb-style ``metadata``, read from JSON lines
    as any reader keeps input fields: the ledger names the rule and the values."""
    docs = [
        {"id": "good", "text": "a fine page", "toxic_score": 0.01, "metadata": {"token_count": 900}},
        {"id": "toxic", "text": "a bad page", "toxic_score": 0.8, "metadata": {"token_count": 900}},
        {"id": "short", "text": "tiny", "toxic_score": 0.0, "metadata": {"token_count": 3}},
        {"id": "unscored", "text": "no score", "metadata": {"token_count": 500}},
    ]
    write_jsonl(tmp_path / "in" / "a.jsonl", docs)
    config = write_config(
        tmp_path / "run.toml",
        '[sources.web]\npaths = ["in/*.jsonl"]\n[[stages]]\nname = "column_filter"\n'
        "[stages.rules]\n"
        'not_toxic = {expr = "toxic_score < 0.5", missing = "drop"}\n'
        'long_enough = "metadata.token_count >= 50"\n',
    )
    manifest = run_pipeline(config, tmp_path / "out", workers=1, quiet=True)
    kept = pq.read_table(tmp_path / "out" / "docs").column("id").to_pylist()
    assert kept == ["good"]
    ledger = {row["id"]: row for row in pq.read_table(tmp_path / "out" / "rejects").to_pylist()}
    assert {k: (v["stage"], v["reason"], v["detail"]) for k, v in ledger.items()} == {
        "toxic": ("column_filter", "column_filter:not_toxic", "toxic_score=0.8"),
        "short": ("column_filter", "column_filter:long_enough", "metadata.token_count=3"),
        "unscored": ("column_filter", "column_filter:not_toxic", "toxic_score=null"),
    }
    stage = manifest["stages"]["column_filter"]
    assert stage["counters"] == {"column_filter.not_toxic.missing": 1}
    assert manifest["balance"] == {"input": 4, "output": 1, "rejected": 3}


def test_a_run_filters_a_previous_runs_output_on_its_columns(tmp_path):
    """A first run's kept documents (Parquet, with the columns its stages added) are the
    second run's input: its ``n_chars`` is a column like any shipped signal."""
    docs = [{"id": f"d{i}", "text": "word " * i} for i in (2, 5, 30)]
    write_jsonl(tmp_path / "in" / "a.jsonl", docs)
    first = write_config(
        tmp_path / "first.toml", '[sources.web]\npaths = ["in/*.jsonl"]\n[[stages]]\nname = "length"\n'
    )
    run_pipeline(first, tmp_path / "first", workers=1, quiet=True)
    second = write_config(
        tmp_path / "second.toml",
        '[sources.web]\npaths = ["first/docs/**/*.parquet"]\n[[stages]]\nname = "column_filter"\n'
        '[stages.rules]\nlong = "n_chars >= 20"\n',
    )
    run_pipeline(second, tmp_path / "second", workers=1, quiet=True)
    assert pq.read_table(tmp_path / "second" / "docs").column("id").to_pylist() == ["d5", "d30"]
    [row] = pq.read_table(tmp_path / "second" / "rejects").to_pylist()
    assert (row["id"], row["reason"], row["detail"]) == ("d2", "column_filter:long", "n_chars=10")


def test_a_rule_at_the_depth_bound_parses_and_evaluates():
    rule = "(" * 64 + "x" + ")" * 64 + " > 1 and " + " + ".join(["x"] * 60) + " > 1"
    reasons, _, _ = judge({"x": [0.5, 2.0]}, rules={"r": rule})
    assert reasons == ["column_filter:r", None]


def test_a_bad_rule_is_a_config_error_before_any_work(tmp_path):
    config = write_config(
        tmp_path / "run.toml",
        '[sources.web]\npaths = ["in/*.jsonl"]\n[[stages]]\nname = "column_filter"\n'
        '[stages.rules]\nwords = "50 <= (rps_doc_word_count <= 100000"\n',
    )
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"text": "x"}])
    with pytest.raises(ConfigError, match=r"rule 'words': unbalanced '\(' \(no matching '\)'\) at position 6"):
        load_config(config)


def _recipe() -> dict:
    """configs/redpajama_v2.toml's column_filter table, read as TOML (the config as a whole
    needs the redpajama-v2 reader to load)."""
    config = tomllib.loads((REPO / "configs" / "redpajama_v2.toml").read_text())
    [table] = [stage for stage in config["stages"] if stage["name"] == "column_filter"]
    return {key: value for key, value in table.items() if key != "name"}


def _recipe_in_python(doc: dict) -> str | None:
    """The recipe as the dataset card writes its gopher_rules_pass, plus the rest of Gopher
    and C4's page rules: the first rule (by name) a document fails, None if it passes; a
    signal that is null (or a ratio over zero lines) fails its rule, as the config's
    missing = "drop"."""

    def fails(values: tuple, test) -> bool:
        return any(v is None for v in values) or not test(*values)

    nlines, bullets = doc["ccnet_nlines"], doc["rps_lines_start_with_bulletpoint_sum"]
    checks = [
        ("gopher_word_count", (doc["rps_doc_word_count"],), lambda w: 50 <= w <= 100_000),
        ("gopher_mean_word_length", (doc["rps_doc_mean_word_length"],), lambda m: 3 <= m <= 10),
        ("gopher_symbol_to_word", (doc["rps_doc_symbol_to_word_ratio"],), lambda r: r <= 0.1),
        ("gopher_bullets", (bullets, nlines or None), lambda b, n: b / n <= 0.9),
        ("gopher_top_2gram", (doc["rps_doc_frac_chars_top_2gram"],), lambda f: f <= 0.2),
        ("gopher_ellipsis", (doc["rps_doc_frac_lines_end_with_ellipsis"],), lambda f: f <= 0.3),
        ("gopher_alphabetic", (doc["rps_doc_frac_no_alph_words"],), lambda f: f <= 0.2),
        ("gopher_top_3gram", (doc["rps_doc_frac_chars_top_3gram"],), lambda f: f <= 0.18),
        ("gopher_top_4gram", (doc["rps_doc_frac_chars_top_4gram"],), lambda f: f <= 0.16),
        *(
            (f"gopher_dupe_{n}grams", (doc[f"rps_doc_frac_chars_dupe_{n}grams"],), lambda f, t=t: f <= t)
            for n, t in zip(range(5, 11), (0.15, 0.14, 0.13, 0.12, 0.11, 0.10))
        ),
        ("c4_curly_bracket", (doc["rps_doc_curly_bracket"],), lambda v: v == 0),
        ("c4_lorem_ipsum", (doc["rps_doc_lorem_ipsum"],), lambda v: v == 0),
        ("c4_sentences", (doc["rps_doc_num_sentences"],), lambda v: v >= 5),
        ("c4_bad_words", (doc["rps_doc_ldnoobw_words"],), lambda v: v == 0),
    ]
    if doc["is_duplicate"]:
        return "column_filter:duplicate"
    for name, values, test in sorted(checks, key=lambda check: check[0]):  # by name, as the stage
        if fails(values, test):
            return f"column_filter:{name}"
    return None


# Per signal: values that pass the recipe (its boundaries included), and values that fail.
SIGNALS = {
    "rps_doc_word_count": ([50.0, 300.0, 100_000.0], [10.0, 49.0, 100_001.0]),
    "rps_doc_mean_word_length": ([3.0, 5.0, 10.0], [2.9, 10.5]),
    "rps_doc_symbol_to_word_ratio": ([0.0, 0.1], [0.11]),
    "ccnet_nlines": ([10.0], [0.0]),  # with the bullets below: 0 lines fails the ratio
    "rps_lines_start_with_bulletpoint_sum": ([0.0, 9.0], [10.0]),
    "rps_doc_frac_chars_top_2gram": ([0.0, 0.2], [0.21]),
    "rps_doc_frac_lines_end_with_ellipsis": ([0.0, 0.3], [0.31]),
    "rps_doc_frac_no_alph_words": ([0.0, 0.2], [0.21]),
    "rps_doc_frac_chars_top_3gram": ([0.0, 0.18], [0.19]),
    "rps_doc_frac_chars_top_4gram": ([0.0, 0.16], [0.17]),
    **{
        f"rps_doc_frac_chars_dupe_{n}grams": ([0.0, t], [t + 0.01])
        for n, t in zip(range(5, 11), (0.15, 0.14, 0.13, 0.12, 0.11, 0.10))
    },
    "rps_doc_curly_bracket": ([0.0], [0.001]),
    "rps_doc_lorem_ipsum": ([0.0], [0.002]),
    "rps_doc_num_sentences": ([5.0, 30.0], [4.0]),
    "rps_doc_ldnoobw_words": ([0.0], [1.0]),
}


@st.composite
def _signal_rows(draw) -> dict:
    """A document's signals: passing values, with up to two of them failing or null (so
    every rule, however far down the list, is reached and decides some documents)."""
    doc = {name: draw(st.sampled_from(passing)) for name, (passing, _) in SIGNALS.items()}
    for name in draw(st.lists(st.sampled_from(sorted(SIGNALS)), max_size=2)):
        doc[name] = draw(st.one_of(st.none(), st.sampled_from(SIGNALS[name][1])))
    doc["is_duplicate"] = draw(st.one_of(st.none(), st.booleans(), st.just(False), st.just(False)))
    return doc


@settings(max_examples=300, deadline=None)
@given(docs=st.lists(_signal_rows(), min_size=1, max_size=8))
def test_the_redpajama_v2_recipe_keeps_what_the_dataset_cards_python_keeps(docs):
    rows = {name: pa.array([doc[name] for doc in docs], pa.float64()) for name in SIGNALS}
    rows["is_duplicate"] = pa.array([doc["is_duplicate"] for doc in docs], pa.bool_())
    assert judge(rows, **_recipe())[0] == [_recipe_in_python(doc) for doc in docs]

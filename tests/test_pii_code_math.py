"""PII in code and math: the policies never corrupt them.

Every replacement made in the bundled sample's code and math must be one a person read
and judged right (``tests/data/pii_code_math_review.jsonl``, see
``benchmarks/pii_code_math.py``); every Python file of the shared and bundled code that
parsed before scrubbing still parses after; and the look-alikes found in those corpora
stay as they are.
"""

from __future__ import annotations

import ast
import gzip
import json
import warnings

import pyarrow as pa
import pytest

from benchmarks.pii_code_math import REPO, corpora, key, read_review, replacements
from stages.pii import Pii

STAGE = Pii(Pii.Options())


def test_every_replacement_in_the_sample_code_and_math_was_reviewed_and_right():
    made = [item for name, path, kind in corpora(None) for item in replacements(name, path, kind, STAGE)]
    review = read_review()
    unreviewed = [(m["corpus"], m["type"], m["match"]) for m in made if key(m) not in review]
    assert unreviewed == [], "new replacements: judge them (python -m benchmarks.pii_code_math --new N)"
    assert [review[key(m)]["match"] for m in made if review[key(m)]["verdict"] != "true"] == []
    assert {m["type"] for m in made} <= {"email", "ip", "secret"}  # no phone, card, SSN or IBAN in code/math


def _python_files(shared_data) -> list[str]:
    files = [REPO / "data" / "sample" / "code" / "python_stdlib.jsonl.gz"]
    if shared_data is not None:
        files.append(shared_data / "code" / "python_stdlib.jsonl.gz")
    texts = []
    for path in files:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            texts += [json.loads(line)["text"] for line in f]
    return texts


def _parses(source: str) -> bool:
    try:
        with warnings.catch_warnings():  # old escapes in the stdlib's sources
            warnings.simplefilter("ignore", DeprecationWarning)
            ast.parse(source)
        return True
    except (SyntaxError, ValueError):
        return False


def test_python_that_parsed_still_parses(shared_data):
    texts = _python_files(shared_data)
    scrubbed, counts, changed = STAGE.scrub(pa.array(texts, pa.large_string()), "code")
    assert changed > 50 and counts["email"] > 100  # the authors' addresses did go
    broken = [
        before.split("\n", 1)[0]
        for before, after in zip(texts, scrubbed.to_pylist())
        if before != after and _parses(before) and not _parses(after)
    ]
    assert broken == []


@pytest.mark.parametrize(
    "kind, text",
    [
        ("math", "She had 24-63-25=<<24-63-25=148>>148 apples, then $5200 - $4940 = $260."),
        ("math", "Phone-shaped results: 1000-300 = <<1000-300=700>>700 and 320-200-75 = 45."),
        ("math", "By Lemma 4.5.13.1 and \\cite[IV Corollary 4.5.13.1(i)]{EGA} we get 4111 1111 1111 1111."),
        ("code", "// 12.2.4.44 Bogus comment state\nfunction bogus() {}"),
        ("code", "  // [27.4.2.2] fmtflags state functions\n  /* 30.3.3.5 aUnsupportedOpcodesReceived */"),
        ("code", "// C++14 20.8.2.3\n * IEEE Std 802.11-2012, 8.4.2.97.\n * from CDC spec 5.2.3.11 */"),
        ("code", '#define GNUTLS_OID_X520_GENERATION_QUALIFIER "2.5.4.44"\n#define Z3_FULL_VERSION "4.8.12.0"'),
        ("code", "if (url.match(/^git@github.com:/)) { url = url.replace(/^git@github.com:/, 'https://') }"),
        ("code", "('git+ssh://git@github.com/user/project.git', ('git+ssh', 'git@github.com', '/p.git'))"),
        ("code", 'url = "http://User:Pass@www.python.org:080/doc/"\n<DocTest foo@baz from foo@baz.py:0>'),
        ("code", "parser.get_addr_spec('star@a.star@example.com')  # and dinsdale@example.com"),
        (
            "code",
            "Message-ID: <20050713212311.GC4701@andy.gregorykjohnson.com>\n<f30c0419-f549-4218@y3g.googlegroups.com>",
        ),
        ("code", "#define INADDR_ALLHOSTS_GROUP 0xe0000001U /* 224.0.0.1 */\nx = '314159265358979'"),
        ("code", "def test(self):\n    self.assertEqual(pi_digits(15), '314159265358979')  # call 415 555 2671"),
        ("web", "Step 3: 4200 - 3700 = <<4200-3700=500>>500 BC; the total is 1000-135=865."),
        ("web", "See section 12.2.4.44 of the HTML standard, and clause [27.4.2.2]."),
    ],
)
def test_look_alikes_in_code_and_math_stay(kind, text):
    assert STAGE.find([text], kind) == [[]]


@pytest.mark.parametrize(
    "kind, text, expected",
    [
        ("code", "# Author: Sam Rushing <rushing@nightmare.com>", "# Author: Sam Rushing <<EMAIL>>"),
        ("code", "=item Chad Granum E<lt>exodist@cpan.orgE<gt>", "=item Chad Granum E<lt><EMAIL>E<gt>"),
        ("code", "AWS_KEY = 'AKIAIOSFODNN7EXAMPLE'", "AWS_KEY = '<SECRET>'"),
        ("code", "server = ipaddress.IPv4Address('65.54.227.120')", "server = ipaddress.IPv4Address('<IP_ADDRESS>')"),
        ("code", "fetch('http://93.184.216.34/status')", "fetch('http://<IP_ADDRESS>/status')"),
        ("math", "Questions to stacks.project@gmail.com please.", "Questions to <EMAIL> please."),
        ("web", "Call +1 (415) 555-2671 today.", "Call <PHONE> today."),
    ],
)
def test_real_pii_in_code_and_math_still_goes(kind, text, expected):
    scrubbed, _, changed = STAGE.scrub(pa.array([text], pa.large_string()), kind)
    assert changed == 1 and scrubbed.to_pylist() == [expected]


def test_sources_take_their_kind_from_the_options():
    options = Pii.Options(code_sources=["github"], math_sources=["arxiv", "math"])
    assert [options.kind(s) for s in ("github", "arxiv", "math", "code", "web")] == [
        "code",
        "math",
        "math",
        "web",
        "web",
    ]
    with pytest.raises(ValueError, match="both"):
        Pii.Options(code_sources=["x"], math_sources=["x"])
    with pytest.raises(ValueError, match="phon"):
        Pii.Options(code_types=["phon"])

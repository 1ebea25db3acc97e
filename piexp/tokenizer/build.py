"""The offline build of the Qwen3 tokenizer: a real Hugging Face fast tokenizer rebuilt
from the vocabulary that the installed ``tml_renderers`` package carries (ranks are
token ids; BPE merges are recovered from those ranks as transformers'
``TikTokenConverter`` does; NFC, Qwen's pre-tokenizer regex, byte-level pre-tokenizer
and decoder, and the 26 added tokens with Qwen3's "special" flags), written once,
atomically, to a cache directory, so that air-gapped runs and tests never reach the
Hugging Face hub. A smaller vocabulary of the same tokenizer keeps Qwen3's first N BPE
tokens (every byte, then the first merges: any text still encodes, in more tokens) and
the same added tokens, numbered from N; a small local model uses it, because its output
layer's cost grows with the vocabulary. transformers and tokenizers are imported inside the functions that
build, because importing them takes seconds."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - typing only
    from tokenizers import Tokenizer as RustTokenizer

#: Pre-tokenizer regex of Qwen2/Qwen3's ``tokenizer.json`` (note ``\p{N}`` splits
#: numbers into single digits, unlike cl100k's ``\p{N}{1,3}``).
QWEN3_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

#: Added tokens of Qwen3 in id order, with the ``special`` flag of Qwen3's
#: ``tokenizer_config.json``.  Ids are not hard-coded: they are read from
#: ``tml_renderers`` and checked to be contiguous after the BPE vocabulary.
_QWEN3_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)

_EOS_TOKEN = "<|im_end|>"
_PAD_TOKEN = "<|endoftext|>"
_MODEL_MAX_LENGTH = 131072

#: Bump when the build recipe changes so stale caches are rebuilt, not trusted.
_BUILD_FORMAT_VERSION = 2
_MARKER_FILE = "piexp_tokenizer_build.json"
_CACHE_SUBDIR = ("tokenizers", "qwen3")


# --------------------------------------------------------------------------- paths


def piexp_cache_dir() -> Path:
    """Root of piexp's caches: ``$PIEXP_CACHE_DIR`` or ``~/.cache/piexp``.

    Read on every call (not at import) so tests and launchers can redirect it.
    """
    env = os.environ.get("PIEXP_CACHE_DIR", "").strip()
    return Path(env).expanduser() if env else Path.home() / ".cache" / "piexp"


def _qwen3_cache_path(bpe_tokens: int | None = None) -> Path:
    path = piexp_cache_dir().joinpath(*_CACHE_SUBDIR)
    return path if bpe_tokens is None else path.with_name(f"{path.name}-bpe{bpe_tokens}")


def _tml_renderers_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tml_renderers")
    except PackageNotFoundError:  # pragma: no cover - source checkout
        return "unknown"


def _expected_marker(bpe_tokens: int | None = None) -> dict[str, Any]:
    marker: dict[str, Any] = {"format_version": _BUILD_FORMAT_VERSION, "source": "tml_renderers.Qwen3Tokenizer"}
    return marker if bpe_tokens is None else {**marker, "bpe_tokens": bpe_tokens}


def _is_complete(path: Path, bpe_tokens: int | None = None) -> bool:
    """A cache dir is usable only if its marker (written last) matches this recipe."""
    try:
        marker = json.loads((path / _MARKER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    expected = _expected_marker(bpe_tokens)
    return (
        all(marker.get(k) == v for k, v in expected.items())
        and marker.get("bpe_tokens") == bpe_tokens
        and (path / "tokenizer.json").is_file()
    )


# --------------------------------------------------------------------------- build


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2 byte -> printable unicode map used by byte-level BPE vocabularies."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs), strict=True))


def _qwen3_ranks_and_specials(bpe_tokens: int | None = None) -> tuple[dict[bytes, int], list[tuple[str, int, bool]]]:
    """Read mergeable ranks and added-token ids from ``tml_renderers``.

    Every id below the first special id is a BPE token whose bytes we take from
    ``decode_bytes``; its rank is its id.  Special ids are verified against
    ``encode_special`` so a vocabulary change upstream fails loudly here instead of
    silently shifting ids.  With ``bpe_tokens``, only the ranks below it are kept (the
    first 256 are Qwen3's single bytes) and the added tokens follow them.
    """
    from tml_renderers.tokenizers import Qwen3Tokenizer

    tml = Qwen3Tokenizer()
    specials: list[tuple[str, int, bool]] = []
    for content, special in _QWEN3_ADDED_TOKENS:
        specials.append((content, int(tml.encode_special(content)), special))
    ids = [tid for _, tid, _ in specials]
    first = ids[0]
    if ids != list(range(first, first + len(ids))):
        raise RuntimeError(f"Qwen3 special token ids are not contiguous: {ids}")
    unknown = set(tml.all_special_tokens) - {c for c, _ in _QWEN3_ADDED_TOKENS}
    if unknown:
        raise RuntimeError(f"tml_renderers' Qwen3 tokenizer has unexpected specials: {unknown}")

    if bpe_tokens is not None:
        if not 256 <= bpe_tokens <= first:
            raise ValueError(
                f"bpe_tokens must lie in [256, {first}] (every byte, at most Qwen3's BPE), not {bpe_tokens}"
            )
        specials = [(content, bpe_tokens + i, special) for i, (content, _, special) in enumerate(specials)]
        first = bpe_tokens
    ranks: dict[bytes, int] = {}
    for rank in range(first):
        piece = bytes(tml.decode_bytes([rank]))
        if piece in ranks:
            raise RuntimeError(f"duplicate Qwen3 token bytes {piece!r} at ids {ranks[piece]}, {rank}")
        ranks[piece] = rank
    if any(len(piece) != 1 for piece, rank in ranks.items() if rank < 256) or len(ranks) < 256:
        raise RuntimeError("Qwen3's first 256 ids are no longer its single bytes")
    return ranks, specials


def _recover_merge(token: bytes, ranks: dict[bytes, int]) -> tuple[bytes, bytes] | None:
    """The pair whose merge produces ``token`` under tiktoken's rank-based BPE.

    Run byte-level BPE on the token's own bytes using only lower-ranked tokens (what
    tiktoken does: always merge the adjacent pair whose concatenation has the lowest
    rank, leftmost on ties); the two parts left at the end are the merge that makes
    ``token``.  ``None`` when the token cannot be reached that way.
    """
    limit = ranks[token]
    parts = [token[i : i + 1] for i in range(len(token))]
    while len(parts) > 2:
        best_i, best_rank = -1, limit
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < best_rank:
                best_i, best_rank = i, r
        if best_i < 0:
            return None
        parts[best_i : best_i + 2] = [parts[best_i] + parts[best_i + 1]]
    return (parts[0], parts[1]) if len(parts) == 2 else None


def _vocab_and_merges(ranks: dict[bytes, int]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Byte-level vocab and BPE merges equivalent to tiktoken's rank-based merging.

    One merge per multi-byte token, recovered by :func:`_recover_merge` and ordered by
    the produced token's rank, so HF's merge-priority BPE replays tiktoken's choices
    (this is how Qwen's own ``merges.txt`` relates to ``qwen.tiktoken``: 151,387 merges
    for 151,643 tokens).  A token no merge sequence reaches (none in Qwen3, but kept
    for safety) falls back to transformers' ``TikTokenConverter`` rule: every split
    into two known tokens.  Half the merges of that rule also halves the
    ``tokenizer.json`` size and its load time.
    """
    byte_encoder = _bytes_to_unicode()

    def to_str(b: bytes) -> str:
        return "".join(byte_encoder[x] for x in b)

    vocab: dict[str, int] = {}
    merges: list[tuple[int, int, int, bytes, bytes]] = []
    for token, rank in ranks.items():
        vocab[to_str(token)] = rank
        if len(token) < 2:
            continue
        pair = _recover_merge(token, ranks)
        candidates = [pair] if pair is not None else [(token[:i], token[i:]) for i in range(1, len(token))]
        for left, right in candidates:
            lr, rr = ranks.get(left), ranks.get(right)
            if lr is not None and rr is not None:
                merges.append((rank, lr, rr, left, right))
    merges.sort(key=lambda m: (m[0], m[1], m[2]))
    return vocab, [(to_str(left), to_str(right)) for _, _, _, left, right in merges]


def _build_backend(bpe_tokens: int | None = None) -> RustTokenizer:
    """Assemble the ``tokenizers`` object mirroring Qwen3's ``tokenizer.json``."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import BPE

    ranks, specials = _qwen3_ranks_and_specials(bpe_tokens)
    vocab, merges = _vocab_and_merges(ranks)
    if len(vocab) != specials[0][1]:
        raise RuntimeError(f"BPE vocab has {len(vocab)} entries, expected {specials[0][1]}")
    model = BPE(
        vocab,
        merges,
        dropout=None,
        unk_token=None,
        continuing_subword_prefix="",
        end_of_word_suffix="",
        fuse_unk=False,
        byte_fallback=False,
    )
    # tiktoken (and tml_renderers) take a pre-token that is itself in the vocabulary
    # as one token; ignore_merges gives the BPE model the same shortcut.
    model.ignore_merges = True
    tok = Tokenizer(model)
    # tml_renderers and Qwen's published tokenizer both NFC-normalise first.
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN3_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    # Added in id order: tokenizers assigns the next free id, which is the verified one.
    for content, expected_id, special in specials:
        tok.add_tokens(
            [AddedToken(content, single_word=False, lstrip=False, rstrip=False, normalized=False, special=special)]
        )
        got = tok.token_to_id(content)
        if got != expected_id:
            raise RuntimeError(f"{content} got id {got}, expected {expected_id}")
    return tok


def _write_tokenizer_files(out_dir: Path, bpe_tokens: int | None = None) -> None:
    """Write a ``save_pretrained`` directory loadable by transformers, plus our marker."""
    from transformers import PreTrainedTokenizerFast

    backend = _build_backend(bpe_tokens)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=_EOS_TOKEN,
        pad_token=_PAD_TOKEN,
        bos_token=None,
        unk_token=None,
        model_max_length=_MODEL_MAX_LENGTH,
        clean_up_tokenization_spaces=False,
        split_special_tokens=False,
        errors="replace",
        add_bos_token=False,
        # Mirrors Qwen3's additional_special_tokens (the "special" added tokens).
        extra_special_tokens=[c for c, s in _QWEN3_ADDED_TOKENS if s and c != _PAD_TOKEN],
    )
    hf.save_pretrained(str(out_dir))
    digest = hashlib.sha256((out_dir / "tokenizer.json").read_bytes()).hexdigest()
    marker = {
        **_expected_marker(bpe_tokens),
        "tml_renderers_version": _tml_renderers_version(),
        "tokenizer_json_sha256": digest,
    }
    (out_dir / _MARKER_FILE).write_text(json.dumps(marker, indent=2, sort_keys=True) + "\n", encoding="utf-8")


_BUILD_LOCK = threading.Lock()


def build_qwen3_tokenizer_dir(
    target: Path | None = None, *, force: bool = False, bpe_tokens: int | None = None
) -> Path:
    """Build the tokenizer (with ``bpe_tokens``: the smaller vocabulary) into ``target``
    atomically and return ``target``.

    Written into a temporary sibling directory and renamed into place, so a crash or
    a concurrent process never leaves a half-written cache that later loads as a
    broken tokenizer.  If another process wins the race, its copy is kept.
    """
    target = Path(target) if target is not None else _qwen3_cache_path(bpe_tokens)
    with _BUILD_LOCK:
        if not force and _is_complete(target, bpe_tokens):
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
        try:
            tmp.chmod(0o755)  # mkdtemp makes it owner-only; a shared cache should be readable
            _write_tokenizer_files(tmp, bpe_tokens)
            if target.exists():
                if not force and _is_complete(target, bpe_tokens):  # another process finished first
                    return target
                # Stale or broken: move aside first (rename is atomic), then delete.
                trash = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
                os.replace(target, trash / "old")
                shutil.rmtree(trash, ignore_errors=True)
            try:
                os.rename(tmp, target)
            except OSError:
                if not _is_complete(target, bpe_tokens):
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def offline_qwen3_tokenizer_dir(bpe_tokens: int | None = None) -> Path:
    """Directory of the cached Qwen3 tokenizer (with ``bpe_tokens``: its smaller
    vocabulary), building it first if missing or stale."""
    path = _qwen3_cache_path(bpe_tokens)
    if _is_complete(path, bpe_tokens):
        return path
    return build_qwen3_tokenizer_dir(path, bpe_tokens=bpe_tokens)

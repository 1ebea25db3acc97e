"""A loaded tokenizer kept as a pickle, so the next process unpickles it (about 0.3 s)
instead of running transformers' ``from_pretrained`` again (about 1 s for Qwen3's: it
parses the 11 MB tokenizer.json in Python, builds the Rust backend from it and then
deep-copies that backend). Every piexp job loads a tokenizer, so this is paid by each.

The pickle is the object ``from_pretrained`` returned, so what is unpickled is that object,
attribute for attribute: nothing is rebuilt another way. Its file is named by a digest of
everything ``from_pretrained`` reads (every file of the folder but model weights), the
folder's path (the tokenizer records it as ``name_or_path``) and the versions of Python,
transformers and tokenizers: any change loads afresh and writes a new snapshot. A snapshot
that cannot be read, or a file another user could have written, is ignored (loaded
afresh); writing is atomic, so processes loading at once never read half a file, and a
snapshot that cannot be written (a read-only or full disk) only costs the next process
the full load. Snapshots are never removed: one per tokenizer folder and library
versions (about 5 MB for Qwen3's vocabulary), under ``$PIEXP_CACHE_DIR/tokenizer-snapshots``,
which may be deleted at any time.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import stat
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from .build import piexp_cache_dir

__all__ = ["load_tokenizer", "snapshot_path"]

#: Files of a model folder that ``from_pretrained`` never reads (the weights): left out of
#: the key, so keying a model folder's tokenizer does not hash its weights.
_WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".msgpack", ".npz", ".h5", ".ckpt", ".gguf")


def snapshot_path(folder: Path) -> Path:
    """Where the snapshot of the tokenizer in `folder` is (or would be) kept."""
    key = hashlib.sha256()
    key.update(str(folder).encode())
    for name in ("transformers", "tokenizers"):
        key.update(f"\0{name}={metadata.version(name)}".encode())
    key.update(f"\0python={sys.version}".encode())
    for path in sorted(folder.iterdir()):
        if path.is_file() and not path.name.endswith(_WEIGHTS):
            key.update(f"\0{path.name}\0".encode())
            key.update(hashlib.sha256(path.read_bytes()).digest())
    return piexp_cache_dir() / "tokenizer-snapshots" / f"{key.hexdigest()[:32]}.pickle"


def _trusted(path: Path) -> bool:
    """A regular file of this user that no one else may write."""
    try:
        info = path.stat()
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o022


def load_tokenizer(folder: Path) -> Any:
    """transformers' ``PreTrainedTokenizerFast.from_pretrained(folder)``, from its snapshot
    when one of the same files and versions is kept, else loaded and then kept."""
    path = snapshot_path(folder)
    if _trusted(path):
        try:
            with path.open("rb") as kept:
                return pickle.load(kept)  # noqa: S301 - this user's own cache, checked above
        except Exception:  # noqa: BLE001 - a torn or foreign file: load afresh, keep anew
            pass
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(folder), local_files_only=True)
    staging = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as out:
            pickle.dump(tokenizer, out, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(staging, path)
    except (OSError, pickle.PicklingError):
        # Not kept (a read-only or full disk): the next process loads afresh, as before,
        # and no half-written file is left behind.
        with contextlib.suppress(OSError):  # never written, or its folder cannot be made
            staging.unlink()
    return tokenizer

"""Tests for the offline Qwen3 tokenizer (piexp.tokenizer).

The reference is ``tml_renderers.Qwen3Tokenizer``, the installed, hub-free copy of
Qwen3's vocabulary: our Hugging Face tokenizer must encode exactly like it.
Everything runs with ``HF_HUB_OFFLINE=1`` and a private cache dir, so a hidden
download attempt fails instead of silently succeeding.
"""

from __future__ import annotations

import json
import unicodedata
import os
import pickle
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

from piexp import tokenizer as ptok  # noqa: E402
from piexp.tokenizer import build as ptok_build  # noqa: E402
from piexp.tokenizer import proxy as ptok_proxy  # noqa: E402

SPECIAL_IDS = {
    "<|endoftext|>": 151643,
    "<|im_start|>": 151644,
    "<|im_end|>": 151645,
    "<|object_ref_start|>": 151646,
    "<|object_ref_end|>": 151647,
    "<|box_start|>": 151648,
    "<|box_end|>": 151649,
    "<|quad_start|>": 151650,
    "<|quad_end|>": 151651,
    "<|vision_start|>": 151652,
    "<|vision_end|>": 151653,
    "<|vision_pad|>": 151654,
    "<|image_pad|>": 151655,
    "<|video_pad|>": 151656,
    "<tool_call>": 151657,
    "</tool_call>": 151658,
    "<|fim_prefix|>": 151659,
    "<|fim_middle|>": 151660,
    "<|fim_suffix|>": 151661,
    "<|fim_pad|>": 151662,
    "<|repo_name|>": 151663,
    "<|file_sep|>": 151664,
    "<tool_response>": 151665,
    "</tool_response>": 151666,
    "<think>": 151667,
    "</think>": 151668,
}

CORPUS = [
    "Hello, world!",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    'for (int i = 0; i < 10; ++i) { printf("%d\\n", i); }',
    "numbers: 0 7 42 1234567890 3.14159 -2.5e-10 1,000,000 0xDEADBEEF",
    "日本語のテキストと中文文本，还有한국어。",
    "Ελληνικά, русский, العربية, עברית, हिन्दी, ไทย",
    "emoji 🤖👍🏽👨‍👩‍👧 and flags 🇫🇷🇯🇵",
    "   leading spaces, tabs\t\tand\r\nwindows newlines\n\n\n   trailing   ",
    " " * 37,
    "\n" * 9,
    "café naïve résumé Ünïcödé ﬁ ligature",
    "cafe\u0301 (decomposed, NFC-normalised first)",
    "don't I'LL we've THEY'RE it's",
    "x" * 2000,
    "<tool_call>-like text without the specials: <tools> </tools> <| |>",
    "".join(chr(c) for c in range(0x20, 0x7F)),
    "".join(chr(c) for c in range(0xA0, 0x250)),
    "\u200b\u200d\ufeff zero width and BOM",
    "\x00\x01\x1f control chars \x7f",
]


@pytest.fixture(scope="module")
def cache_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private PIEXP_CACHE_DIR for this module (the build takes seconds). Not for the
    session: the variable stays set while the fixture lives, and the tests that ran after
    this module in the same process (a parallel run's worker) built the SkyRL venv and
    the models again in this folder."""
    root = tmp_path_factory.mktemp("piexp-cache")
    old = os.environ.get("PIEXP_CACHE_DIR")
    os.environ["PIEXP_CACHE_DIR"] = str(root)
    # The loaded backend is process-wide; start from a clean slate for this root.
    ptok_proxy._backends.clear()
    ptok_proxy._proxies.clear()
    try:
        yield root
    finally:
        ptok_proxy._backends.clear()
        ptok_proxy._proxies.clear()
        if old is None:
            os.environ.pop("PIEXP_CACHE_DIR", None)
        else:
            os.environ["PIEXP_CACHE_DIR"] = old


@pytest.fixture(scope="module")
def tok(cache_root: Path) -> ptok.ThreadSafeTokenizer:
    return ptok.load_offline_qwen3_tokenizer()


@pytest.fixture(scope="session")
def tml():
    from tml_renderers.tokenizers import Qwen3Tokenizer

    return Qwen3Tokenizer()


def _extra_corpus() -> list[str]:
    """A few real source files, for volume (deterministic choice)."""
    import tinker_cookbook

    root = Path(tinker_cookbook.__file__).parent
    files = sorted(root.glob("renderers/*.py"))[:6]
    return [f.read_text(encoding="utf-8") for f in files]


def test_cache_location_honours_env(cache_root: Path, tok: ptok.ThreadSafeTokenizer) -> None:
    path = ptok.offline_qwen3_tokenizer_dir()
    assert path == cache_root / "tokenizers" / "qwen3"
    assert (path / "tokenizer.json").is_file()
    marker = json.loads((path / "piexp_tokenizer_build.json").read_text())
    assert marker["format_version"] == ptok_build._BUILD_FORMAT_VERSION
    # No temp dirs left behind by the atomic build.
    assert [p.name for p in path.parent.iterdir()] == ["qwen3"]


def test_encodings_match_tml_renderers(tok: ptok.ThreadSafeTokenizer, tml) -> None:
    for text in CORPUS + _extra_corpus():
        # Real source may mention special-token strings; the HF tokenizer parses those
        # as specials while encode_ordinary does not, so compare around them.
        if any(s in text for s in SPECIAL_IDS):
            for a, b in (("<|", "< |"), ("<tool", "< tool"), ("</t", "< /t"), ("<think>", "< think>")):
                text = text.replace(a, b)
        expected = list(tml.encode_ordinary(text))
        got = tok.encode(text, add_special_tokens=False)
        assert got == expected, text[:80]
        assert tok.decode(got) == tml.decode(expected)


def test_special_tokens(tok: ptok.ThreadSafeTokenizer, tml) -> None:
    for content, tid in SPECIAL_IDS.items():
        assert tml.encode_special(content) == tid
        assert tok.convert_tokens_to_ids(content) == tid
        assert tok.encode(content, add_special_tokens=False) == [tid]
        assert tok.decode([tid]) == content
    assert len(tok) == 151669
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 151645
    assert tok.pad_token == "<|endoftext|>" and tok.pad_token_id == 151643
    assert tok.bos_token is None
    # Known Qwen ids: "<|im_start|>assistant\n".
    assert tok.encode("<|im_start|>assistant\n", add_special_tokens=False) == [151644, 77091, 198]
    # Like Qwen3's own config: <think>/<tool_call> are added but not "special".
    assert 151667 not in tok.all_special_ids and 151645 in tok.all_special_ids
    assert tok.decode([151667, 271, 151645], skip_special_tokens=True) == "<think>\n\n"


def test_loading_twice_hits_cache(cache_root: Path, tok: ptok.ThreadSafeTokenizer, monkeypatch) -> None:
    def boom(*_a, **_k):
        raise AssertionError("rebuilt although the cache was complete")

    monkeypatch.setattr(ptok_build, "_write_tokenizer_files", boom)
    path = ptok.offline_qwen3_tokenizer_dir()
    assert ptok.load_offline_qwen3_tokenizer() is tok
    # A fresh transformers load from the cache dir works offline, too.
    from transformers import PreTrainedTokenizerFast

    again = PreTrainedTokenizerFast.from_pretrained(str(path), local_files_only=True)
    assert again.encode("hello world", add_special_tokens=False) == tok.encode("hello world")


def _state(tokenizer) -> dict:
    """Every attribute of a transformers tokenizer, its Rust backend as its JSON."""
    return {**vars(tokenizer), "_tokenizer": tokenizer.backend_tokenizer.to_str()}


def test_a_tokenizer_from_its_snapshot_is_the_one_from_pretrained_gives(
    cache_root: Path, tok: ptok.ThreadSafeTokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each job unpickles the tokenizer the first one loaded instead of loading it again
    (about 0.3 s against 1 s): the same object, attribute for attribute, encoding alike."""
    from transformers import PreTrainedTokenizerFast

    from piexp.tokenizer.snapshot import load_tokenizer, snapshot_path

    folder = ptok.offline_qwen3_tokenizer_dir()
    assert snapshot_path(folder).is_file()  # kept by the fixture's load
    fresh = PreTrainedTokenizerFast.from_pretrained(str(folder), local_files_only=True)

    def not_again(*_args, **_kwargs):
        raise AssertionError("loaded afresh although its snapshot is kept")

    monkeypatch.setattr(PreTrainedTokenizerFast, "from_pretrained", not_again)
    kept = load_tokenizer(folder)
    assert kept is not fresh and _state(kept) == _state(fresh)
    for text in CORPUS:
        for special in (True, False):
            assert kept.encode(text, add_special_tokens=special) == fresh.encode(text, add_special_tokens=special)
    ids = kept.encode(CORPUS[1] + "<|im_end|>")
    assert kept.decode(ids, skip_special_tokens=True) == fresh.decode(ids, skip_special_tokens=True)


def test_a_changed_file_a_torn_snapshot_or_one_others_may_write_loads_afresh(tmp_path: Path, cache_root: Path) -> None:
    """The snapshot is named by every file the tokenizer is read from and the library
    versions, so an edited config never gets an old tokenizer; a snapshot that does not
    unpickle, or that another user could have written, is loaded afresh and kept anew."""
    import shutil

    from piexp.tokenizer.snapshot import load_tokenizer, snapshot_path

    folder = tmp_path / "model"
    shutil.copytree(ptok.offline_qwen3_tokenizer_dir(), folder)
    assert load_tokenizer(folder).model_max_length == 131072
    first = snapshot_path(folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "model_max_length": 4096}))
    assert snapshot_path(folder) != first
    assert load_tokenizer(folder).model_max_length == 4096
    kept = snapshot_path(folder)
    kept.write_bytes(b"torn")
    assert load_tokenizer(folder).model_max_length == 4096
    assert pickle.loads(kept.read_bytes()).model_max_length == 4096  # kept anew
    with kept.open("wb") as out:  # a tokenizer of other settings, writable by anyone
        pickle.dump(pickle.loads(first.read_bytes()), out)
    kept.chmod(0o666)
    assert load_tokenizer(folder).model_max_length == 4096
    assert kept.stat().st_mode & 0o777 == 0o600


def test_a_snapshot_that_cannot_be_kept_costs_only_the_full_load(
    tmp_path: Path, cache_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cache that cannot be written (here its folder is a file, as root ignores
    permissions) loads the tokenizer as before, with nothing half-written left behind."""
    from piexp.tokenizer.snapshot import load_tokenizer

    blocked = tmp_path / "cache"
    blocked.write_text("not a folder")
    monkeypatch.setenv("PIEXP_CACHE_DIR", str(blocked))
    loaded = load_tokenizer(cache_root / "tokenizers" / "qwen3")  # built under the module's cache
    assert loaded.eos_token == "<|im_end|>" and blocked.read_text() == "not a folder"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]


def test_stale_cache_is_rebuilt_atomically(tmp_path: Path, cache_root: Path) -> None:
    target = tmp_path / "qwen3"
    target.mkdir()
    (target / "piexp_tokenizer_build.json").write_text('{"format_version": -1}')
    (target / "junk").write_text("x")
    out = ptok.build_qwen3_tokenizer_dir(target)
    assert out == target and ptok_build._is_complete(target)
    assert not (target / "junk").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["qwen3"]


def _tools() -> list[dict]:
    return [
        {
            "name": "write",
            "description": "Write a file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
        }
    ]


def test_qwen3_renderer_round_trip(tok: ptok.ThreadSafeTokenizer) -> None:
    from tinker_cookbook import renderers
    from tinker_cookbook.renderers.base import RenderContext, ToolCall

    renderer = renderers.get_renderer("qwen3", tok)
    msgs = renderer.create_conversation_prefix_with_tools(_tools(), "You are helpful.")
    msgs = [*msgs, {"role": "user", "content": "write hi to a.txt"}]
    prompt = renderer.build_generation_prompt(msgs)
    text = tok.decode(prompt.to_ints())
    assert text.startswith("<|im_start|>system\nYou are helpful.")
    assert '"name": "write"' in text
    assert text.endswith("<|im_start|>user\nwrite hi to a.txt<|im_end|>\n<|im_start|>assistant\n")

    args = {"path": "a.txt", "content": "hi\n"}
    call = ToolCall(function=ToolCall.FunctionBody(name="write", arguments=json.dumps(args)))
    assistant = {"role": "assistant", "content": "", "tool_calls": [call]}
    ctx = RenderContext(idx=len(msgs), is_last=True, prev_message=msgs[-1], last_user_index=len(msgs) - 1)
    rendered = renderer.render_message(assistant, ctx)
    tokens = [t for chunk in rendered.output for t in chunk.tokens]
    assert SPECIAL_IDS["<tool_call>"] in tokens and tokens[-1] == SPECIAL_IDS["<|im_end|>"]

    message, termination = renderer.parse_response(tokens)
    assert termination.is_clean
    (parsed,) = message["tool_calls"]
    assert parsed.function.name == "write"
    assert json.loads(parsed.function.arguments) == args


def test_a_smaller_vocabulary_encodes_any_text_and_renders_tool_calls(tmp_path: Path, cache_root: Path) -> None:
    """The smaller vocabulary a local model folder carries (Qwen3's first N BPE tokens and
    its added tokens numbered from N): every text still encodes (in more tokens) and
    decodes back, and the Qwen3 renderer's tool-call turn parses back through it."""
    from tinker_cookbook import renderers
    from tinker_cookbook.renderers.base import RenderContext, ToolCall

    n = 1024
    model_dir = ptok.build_qwen3_tokenizer_dir(tmp_path / "model", bpe_tokens=n)
    small = ptok.load_offline_qwen3_tokenizer(str(model_dir))
    full = ptok.load_offline_qwen3_tokenizer()
    assert len(small) == n + len(ptok_build._QWEN3_ADDED_TOKENS)
    assert small.unwrapped is not full.unwrapped
    for i, (content, _) in enumerate(ptok_build._QWEN3_ADDED_TOKENS):
        assert small.convert_tokens_to_ids(content) == n + i
    for text in CORPUS + _extra_corpus():
        ids = small.encode(text, add_special_tokens=False)
        assert small.decode(ids) == unicodedata.normalize("NFC", text)
        assert len(ids) >= len(full.encode(text, add_special_tokens=False))
        assert all(i < n for i in ids if i not in special_ids_of(small))

    renderer = renderers.get_renderer("qwen3", small)
    msgs = [
        *renderer.create_conversation_prefix_with_tools(_tools(), "You are helpful."),
        {"role": "user", "content": "go"},
    ]
    args = {"path": "a.txt", "content": "hi\n"}
    call = ToolCall(function=ToolCall.FunctionBody(name="write", arguments=json.dumps(args)))
    ctx = RenderContext(idx=len(msgs), is_last=True, prev_message=msgs[-1], last_user_index=len(msgs) - 1)
    rendered = renderer.render_message({"role": "assistant", "content": "", "tool_calls": [call]}, ctx)
    tokens = [t for chunk in rendered.output for t in chunk.tokens]
    assert max(tokens) < len(small) and tokens[-1] == n + 2  # <|im_end|>
    message, termination = renderer.parse_response(tokens)
    assert termination.is_clean
    assert json.loads(message["tool_calls"][0].function.arguments) == args


def special_ids_of(tokenizer: ptok.ThreadSafeTokenizer) -> set[int]:
    return {tokenizer.convert_tokens_to_ids(content) for content, _ in ptok_build._QWEN3_ADDED_TOKENS}


def test_concurrent_rendering_does_not_raise(tok: ptok.ThreadSafeTokenizer) -> None:
    """16 threads render and tokenize at once (transformers issue 47085 trap).

    Mixing truncating ``__call__``s with plain encodes is what makes an unguarded
    transformers 5.5 fast tokenizer raise ``Already borrowed``.
    """
    from tinker_cookbook import renderers

    renderer = renderers.get_renderer("qwen3_instruct", tok)
    prefix = renderer.create_conversation_prefix_with_tools(_tools(), "sys")
    errors: list[BaseException] = []
    start = threading.Barrier(16)

    def work(i: int) -> None:
        try:
            start.wait()
            for j in range(15):
                msgs = [*prefix, {"role": "user", "content": f"thread {i} step {j} " * 20}]
                renderer.build_generation_prompt(msgs)
                tok("hello world " * 50, truncation=True, max_length=10 + i)
                tok.decode(tok.encode(f"{i} {j} 日本語"))
        except BaseException as e:  # noqa: BLE001 - collected and re-raised below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]


def test_proxy_passthrough_and_pickle(tok: ptok.ThreadSafeTokenizer) -> None:
    assert tok.vocab_size == 151643
    assert tok.convert_ids_to_tokens([151667]) == ["<think>"]
    assert tok.batch_decode([[9707], [151645]]) == ["Hello", "<|im_end|>"]
    assert tok.unwrapped.__class__.__name__ in {"PreTrainedTokenizerFast", "TokenizersBackend"}
    named = ptok.load_offline_qwen3_tokenizer("Qwen/Qwen3-8B")
    assert named.name_or_path == "Qwen/Qwen3-8B" and named.unwrapped is tok.unwrapped
    assert pickle.loads(pickle.dumps(named)) is named


def test_register_and_get_tokenizer(tok: ptok.ThreadSafeTokenizer) -> None:
    from tinker_cookbook import renderers, tokenizer_utils

    names = ptok.register_offline_tokenizers()
    try:
        assert "Qwen/Qwen3-8B" in names and "Qwen/Qwen3-4B-Instruct-2507" in names
        got = tokenizer_utils.get_tokenizer("Qwen/Qwen3-8B")
        assert isinstance(got, ptok.ThreadSafeTokenizer)
        assert got.unwrapped is tok.unwrapped and got.name_or_path == "Qwen/Qwen3-8B"
        assert tokenizer_utils.get_tokenizer("Qwen/Qwen3-8B") is got
        # Renderers pickle by model name and rebuild through get_tokenizer.
        renderer = renderers.get_renderer("qwen3", got)
        clone = pickle.loads(pickle.dumps(renderer))
        assert clone.tokenizer is got
    finally:
        for name in names:
            tokenizer_utils.unregister_tokenizer(name)


def test_model_names_match_cookbook() -> None:
    """Every tinker Qwen3 chat model on the qwen3 tokenizer is registered, no others."""
    from tinker_cookbook.model_info import get_qwen_info

    expected = {
        f"Qwen/{name}"
        for name, attrs in get_qwen_info().items()
        if name.startswith("Qwen3-")
        and not attrs.is_vl
        and set(attrs.recommended_renderers) & {"qwen3", "qwen3_instruct"}
    }
    assert set(ptok.QWEN3_MODEL_NAMES) == expected


def test_one_module_registers_tokenizers_with_the_cookbook() -> None:
    """Every tokenizer piexp gives the cookbook (the Qwen3 names, tiny-local, learner-local's
    smaller vocabulary, a local model folder) is registered by
    `piexp.tokenizer.register_offline_tokenizer`: one home for how a name maps to a
    tokenizer, so a change to it cannot miss a model."""
    from pathlib import Path

    package = Path(__file__).resolve().parents[1] / "piexp"
    callers = sorted(
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if "register_tokenizer(" in path.read_text(encoding="utf-8")
    )
    assert callers == ["tokenizer/registration.py"]

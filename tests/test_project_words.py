"""The project speaks only of itself: its code, tests, docs, bench docstrings, configs and
results records say what a thing does and why, or what was measured (commit, date,
machine), never the history of how it was made (the work sessions that wrote it, the
entries of a tracker that is not in the repository, numbered lists of complaints). A
reader cannot tell from such words what holds today; git keeps the history.

Each pattern below is a way that history was written into the tree. A reference to a
third-party project's tracker is fine when it names the project just before the number
(`THIRD_PARTY_TRACKERS`), so a reader knows where to look it up. "session" on its own is
left alone: it also means an HTTP, pytest, tinker or process session."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Where the project speaks: the package, its tests, benches (and their results records),
# docs, configs, experiment presets and the README.
SCANNED = ("piexp", "tests", "bench", "docs", "conf", "experiments", "README.md")
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".c", ".h", ".html", ".js", ".jl", ".json", ".jsonl", ".txt"}

_ORDINAL = (
    r"(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth"
    r"|\w+teenth|\w+tieth|(?:twenty|thirty|forty)-\w+)"
)
NARRATION = {
    "an ordinal work session": re.compile(rf"\b{_ORDINAL}(?:'s)?[ -]sessions?\b", re.I),
    "a work session placed in time": re.compile(
        r"\b(?:this|that|earlier|previous|later|last|next|an earlier|a later) sessions?\b(?!-)"
        r"|\bthe sessions? before\b",
        re.I,
    ),
    "a numbered complaint": re.compile(r"\brough[ -]edges?\b", re.I),
    "a numbered observation": re.compile(r"\bobservations?\s+\d", re.I),
    "a numbered finding": re.compile(r"\bfindings?\s+\d", re.I),
}
ISSUE_NUMBER = re.compile(r"\bissues?\s+#?\d+", re.I)
# Projects whose trackers a line may cite by number, written just before "issue N".
THIRD_PARTY_TRACKERS = {"hydra", "transformers"}
# Lines that match a pattern above in a sense that is not narration: (path, fragment).
# Keep it short; each entry says why.
ALLOWED: set[tuple[str, str]] = set()


def scanned_files() -> list[Path]:
    files = []
    for name in SCANNED:
        path = REPO / name
        if path.is_file():
            files.append(path)
            continue
        for file in sorted(path.rglob("*")):
            if file.is_file() and file.suffix in TEXT_SUFFIXES and "__pycache__" not in file.parts:
                files.append(file)
    return files


def narration_in(text: str) -> list[str]:
    """What in `text` narrates the project's making, one entry per hit."""
    hits = [f"{what}: {match.group(0)!r}" for what, pattern in NARRATION.items() for match in pattern.finditer(text)]
    for match in ISSUE_NUMBER.finditer(text):
        before = re.search(r"([\w.-]+)\W*$", text[: match.start()])
        if before is None or before.group(1).lower() not in THIRD_PARTY_TRACKERS:
            hits.append(f"a tracker entry without its project: {match.group(0)!r}")
    return hits


def test_the_patterns_catch_narration_and_leave_ordinary_words_alone() -> None:
    # Each example split in two, so that this file's own lines do not match.
    for narration in (
        "the twentieth " + "session's submission",
        "Twenty-first " + "session (2026-12-04)",
        "as the " + "session before",
        "Issue " + "30: the help",
        "rough " + "edge 1: the help",
        "issue " + "15",
        "observation " + "9",
        "(issue " + "26, item 5)",
        "finding " + "3 says",
    ):
        assert narration_in(narration), narration
    for ordinary in (
        "Hydra's multirun cannot resume (Hydra issue 3328)",
        "(transformers issue 47085)",
        "bwrap is started as a session leader",
        "start_new_session=True",
        "this pytest session's processes",
        "a fixture of scope session",
        "each turn of the episode",
    ):
        assert not narration_in(ordinary), ordinary


def test_the_project_does_not_narrate_its_making() -> None:
    found = []
    for path in scanned_files():
        relative = path.relative_to(REPO).as_posix()
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if any(relative == allowed_path and fragment in line for allowed_path, fragment in ALLOWED):
                continue
            found.extend(f"{relative}:{number}: {hit}" for hit in narration_in(line))
    assert not found, "say what it does and why, or what was measured (commit, date, machine):\n" + "\n".join(found)


def test_no_file_name_narrates_the_project_s_making() -> None:
    """A file's name is read like its text (`test_` + "rough_edges.py" would be a
    numbered complaint list's name): underscores and hyphens read as spaces."""
    found = [
        f"{relative}: {hit}"
        for path in scanned_files()
        for relative in [path.relative_to(REPO).as_posix()]
        for hit in narration_in(re.sub(r"[_/.-]", " ", relative))
    ]
    assert not found, "name the file for what it holds:\n" + "\n".join(found)

"""The programs the non-solving policies write, one per language.

Each is built to fail in one specific, known way, so that the reward it earns is fully
determined by the reward formula (that is what makes the policies a regression suite for
the reward).
"""

from __future__ import annotations

from piexp.languages import language as registered_language


def crash(language: str) -> str:
    """A program that raises at once: exit code != 0, nothing on stdout."""
    return registered_language(language).raise_statement("scripted crash: this program always fails")


def bug_line(language: str) -> str:
    """The line the `edit` policy prepends to the reference solution and removes again
    with `edit`; the text is unique, so the tool's "exactly one match" rule is met."""
    return registered_language(language).raise_statement("scripted bug: delete this line")


def helper_filename(language: str, taken: set[str]) -> str:
    """A file name for the copied reference that collides with no workspace file."""
    name = f"reference.{registered_language(language).extension}"
    while name in taken:
        name = "_" + name
    return name


def off_by_one(language: str, helper: str) -> str:
    """A program that runs the reference in `helper`, captures what it prints and prints
    the last integer plus one.

    Why derive the wrong answer from the reference: a fixed number could equal the answer
    by chance, and the policy must never look at the stored answer. Off by one is
    guaranteed wrong and is the most realistic wrong output there is.
    """
    if language == "python":
        return f"""# Runs the reference, captures its output, prints its answer plus one (deliberately wrong).
import contextlib
import io
import runpy

buffer = io.StringIO()
with contextlib.redirect_stdout(buffer):
    runpy.run_path({helper!r}, run_name="__main__")
lines = [line.strip() for line in buffer.getvalue().splitlines() if line.strip()]
print(int(lines[-1]) + 1)
"""
    if language == "javascript":
        return f"""// Runs the reference, captures its output, prints its answer plus one (deliberately wrong).
const path = require("path");
const captured = [];
const write = process.stdout.write.bind(process.stdout);
process.stdout.write = (chunk) => {{
  captured.push(String(chunk));
  return true;
}};
process.on("exit", () => {{
  const lines = captured.join("").split("\\n").map((line) => line.trim()).filter((line) => line);
  write(String(BigInt(lines[lines.length - 1]) + 1n) + "\\n");
}});
require(path.resolve({helper!r}));
"""
    if language == "julia":
        return f"""# Runs the reference, captures its output, prints its answer plus one (deliberately wrong).
output = mktemp() do path, io
    redirect_stdout(() -> include(joinpath(pwd(), "{helper}")), io)
    flush(io)
    read(path, String)
end
lines = filter(!isempty, strip.(split(output, "\\n")))
println(parse(Int, lines[end]) + 1)
"""
    raise ValueError(f"no off-by-one program for language {language!r}")

"""`python -m piexp new-family NAME [--dir DIR] [--from-jsonl FILE]`: write a working
family outside piexp's tree. Without `--from-jsonl`: a generator module with typed,
bounded params, Python and JavaScript references beside it in `refs/`, the YAML that
selects it (`DIR/conf/family/NAME.yaml`, naming the code with `_target_`) and a pytest
file that runs `mode=check` on it; with `--from-jsonl FILE`: the YAML of a task-file
family reading FILE (checked first) and the same test. Nothing is overwritten, and
nothing is written when anything is wrong. It ends with the exact commands that check,
preview and evaluate the family, which work from any folder (absolute paths).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from piexp.errors import UserError
from piexp.files import atomic_write_text
from piexp.tasks import BUILTIN_TARGETS
from piexp.tasks.task_file import load_task_file

GENERATOR = '''"""{name}: the sum of the numbers in `numbers.txt` that are divisible by k.

A skeleton written by `python -m piexp new-family`: replace the generator with yours,
keep it deterministic (draw every choice from `rng`), keep every answer within +/-2^53,
and keep the references in refs/ computing the same answer in their own way.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from piexp.tasks import Family


@dataclass(frozen=True)
class {title}Params:
    n_numbers: int = 40  # lines in numbers.txt
    max_value: int = 1000  # each number is drawn from 1..max_value
    max_divisor: int = 9  # the divisor k is drawn from 2..max_divisor


def generate(rng: random.Random, p: {title}Params):
    numbers = [rng.randint(1, p.max_value) for _ in range(p.n_numbers)]
    k = rng.randint(2, p.max_divisor)
    answer = sum(n for n in numbers if n % k == 0)
    instruction = (
        "Each line of `numbers.txt` holds one positive integer. `query.txt` holds a line "
        f"`k=<divisor>` (here k={{k}}). Print the sum of the numbers divisible by k as a decimal integer."
    )
    files = {{"numbers.txt": "\\n".join(map(str, numbers)) + "\\n", "query.txt": f"k={{k}}\\n"}}
    return instruction, files, answer, {{"k": k}}


FAMILY = Family(
    name="{name}",
    summary="sum of the numbers divisible by k",
    params_type={title}Params,
    # Inclusive bounds of every parameter: they keep answers exact and workspaces small.
    limits={{"n_numbers": (1, 500), "max_value": (1, 1_000_000), "max_divisor": (2, 100)}},
    generate=generate,
)
'''

REFERENCE_PY = """k = int(open("query.txt").read().strip().split("=")[1])
numbers = [int(line) for line in open("numbers.txt") if line.strip()]
print(sum(n for n in numbers if n % k == 0))
"""

REFERENCE_JS = """const fs = require("fs");
const k = parseInt(fs.readFileSync("query.txt", "utf8").trim().split("=")[1], 10);
let total = 0;
for (const line of fs.readFileSync("numbers.txt", "utf8").split("\\n")) {
  if (line.trim() && parseInt(line, 10) % k === 0) total += parseInt(line, 10);
}
console.log(total);
"""

GENERATOR_YAML = """# @package family
# {name}: your family. _target_ names its code (on PYTHONPATH); the rest are its
# difficulty params, each checked against the limits in {module_file}.
{name}:
  _target_: {package}.{name}.FAMILY   # the Family object (import path)
  n_numbers: 40   # lines in numbers.txt [1..500]
  max_value: 1000   # each number is drawn from 1..max_value [1..1000000]
  max_divisor: 9   # the divisor k is drawn from 2..max_divisor [2..100]
"""

TASK_FILE_YAML = """# @package family
# {name}: tasks read from a JSON Lines file (one task a line: id, instruction, files,
# answer, optionally references and split); see docs/families.md.
{name}:
  _target_: piexp.tasks.task_file.TaskFileFamily   # the task-file family kind
  path: {path}   # the JSON Lines file (absolute: works from any folder)
  eval_percent: {eval_percent}   # percent of the tasks without a split field that go to eval
"""

TEST_FILE = '''"""`mode=check` on the {name} family: the real sandbox runs its references and the
scripted policies; the test fails when a reference disagrees with an answer."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_{name}_passes_the_check(tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT), env.get("PYTHONPATH", "")] if p)
    command = [
        sys.executable, "-m", "piexp", "--config-dir", str(ROOT / "conf"), "family={name}",
        "lang={languages}", "mode=check", "tasks.train_per_family=2", "tasks.eval_per_family=2",
        f"hydra.run.dir={{tmp_path / 'run'}}",
    ]
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "run" / "check.json").is_file()
'''


def _plan(name: str, root: Path, jsonl: Path | None, eval_percent: int) -> tuple[dict[Path, str], list[str]]:
    """The files to write (path -> text) and the run's languages."""
    conf = root / "conf" / "family" / f"{name}.yaml"
    if jsonl is None:
        package = f"{name}_family"
        module = root / package / f"{name}.py"
        files = {
            root / package / "__init__.py": f'"""The {name} task family (see {name}.py)."""\n',
            module: GENERATOR.format(name=name, title=name.title().replace("_", "")),
            root / package / "refs" / f"{name}.py": REFERENCE_PY,
            root / package / "refs" / f"{name}.js": REFERENCE_JS,
            conf: GENERATOR_YAML.format(name=name, package=package, module_file=module),
        }
        languages = ["python", "javascript"]
    else:
        loaded = load_task_file(name, str(jsonl), eval_percent)  # refused now if malformed
        from piexp.tasks.task_file import TaskFileFamily

        family = TaskFileFamily(name)
        family.make_params({"path": str(jsonl), "eval_percent": eval_percent})
        languages = list(family.reference_languages())
        files = {conf: TASK_FILE_YAML.format(name=name, path=jsonl, eval_percent=eval_percent)}
        if not languages:
            print(
                f"note: {jsonl} has no reference programs for all of its {len(loaded.tasks)} tasks, so mode=check "
                "and the oracle cannot run on it (training and model evaluation can).",
                file=sys.stderr,
            )
    if languages:
        files[root / "tests" / f"test_{name}.py"] = TEST_FILE.format(name=name, languages=",".join(languages))
    return files, languages


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="piexp new-family",
        description="Write a working task family (or a task-file family) outside piexp, with its check.",
    )
    parser.add_argument("name", help="the family's name (an identifier, not a built-in family's)")
    parser.add_argument("--dir", type=Path, default=None, help="the folder to write into (default: ./NAME)")
    parser.add_argument(
        "--from-jsonl",
        type=Path,
        default=None,
        metavar="FILE",
        help="a JSON Lines task file (or .parquet, or a datasets folder) to serve as a family",
    )
    parser.add_argument(
        "--eval-percent", type=int, default=20, metavar="N", help="with --from-jsonl: percent of tasks for eval"
    )
    args = parser.parse_args(list(argv))
    name: str = args.name
    if not name.isidentifier() or not name.islower():
        raise UserError(f"new-family {name}: a family's name must be a lowercase identifier (letters, digits, _).")
    if name in BUILTIN_TARGETS:
        raise UserError(f"new-family {name}: {name} is a built-in family's name; choose another.")
    if not 0 <= args.eval_percent <= 100:
        raise UserError(f"--eval-percent must be within 0..100, got {args.eval_percent}.")
    root = (args.dir or Path(name)).expanduser().resolve()
    jsonl = args.from_jsonl.expanduser().resolve() if args.from_jsonl else None
    files, languages = _plan(name, root, jsonl, args.eval_percent)
    existing = [str(path) for path in files if path.exists()]
    if existing:
        raise UserError(f"new-family {name}: {', '.join(existing)} already exist(s); nothing was written. Use --dir.")
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)
    _print_next_steps(name, root, jsonl, languages, files)
    return 0


def _print_next_steps(name: str, root: Path, jsonl: Path | None, languages: list[str], files: dict) -> None:
    python = shlex.quote(sys.executable)
    env = f"PYTHONPATH={shlex.quote(str(root))}${{PYTHONPATH:+:$PYTHONPATH}}"
    base = f"{env} {python} -m piexp"
    conf = f"--config-dir {shlex.quote(str(root / 'conf'))} family={name}"
    lang = f" lang={','.join(languages)}" if languages else ""
    print(f"wrote {len(files)} files under {root}:")
    for path in files:
        print(f"  {path}")
    if jsonl is None:
        print(
            f"\nChange first: generate() and {name.title().replace('_', '')}Params in {root / (name + '_family') / (name + '.py')} "
            f"(each param a default, a `# meaning` comment and limits), then the references in "
            f"{root / (name + '_family') / 'refs'} so they compute the same answer, and the params in "
            f"{root / 'conf' / 'family' / (name + '.yaml')}."
        )
    print("\nPreview its tasks, check it (references and scripted policies in the sandbox), evaluate the oracle:")
    print(f"  {base} tasks {conf} n=2")
    if languages:
        print(f"  {base} {conf}{lang} mode=check")
        print(f"  {base} {conf}{lang} mode=eval policy=oracle")
        print(f"  {env} {python} -m pytest {shlex.quote(str(root / 'tests'))}")
    print(f"Train it like any family: {base} {conf}{lang} (mode=train, see README).")

"""The documentation site stays true: it builds with `mkdocs build --strict` (a broken
link, a missing anchor or an undocumented config key fails the build), its generated
reference covers every config key and subcommand, and every `python -m piexp ...` line
of its quick-start pages composes and validates (`--cfg job`), as tests/test_readme.py
does for the README."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from pydantic import BaseModel, Field

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
# The pages a newcomer follows step by step: each command on them must work as shown.
QUICK_START_PAGES = ("quickstart.md", "training-offline.md", "training-tinker.md", "index.md")
# Commands that need a finished run folder; tests/sweeps, tests/transcripts and
# tests/launch run them on real folders.
NEEDS_RUN_FOLDER = ("summarize", "reproduce", "status", "show", "compare", "rescore", "replay")
# A command a page marks so needs an account to *run*; it still composes without one.
NEEDS_ACCOUNT = "needs TINKER_API_KEY"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference", DOCS / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


gen_reference = _generator()


def _env() -> dict[str, str]:
    # No account: a command that composes here composes for a newcomer without one.
    env = {key: value for key, value in os.environ.items() if key != "TINKER_API_KEY"}
    env["PYTHONPATH"] = str(REPO)
    env["NO_MKDOCS_2_WARNING"] = "1"  # Material's banner about its successor
    return env


def build_site(site_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site_dir = tmp_path_factory.mktemp("site")
    done = build_site(site_dir)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return site_dir


def test_the_site_builds_strictly_with_every_page(site: Path) -> None:
    import yaml

    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8").replace("!!python", "#"))["nav"]

    def pages(entries: list[object]) -> list[str]:
        found: list[str] = []
        for entry in entries:
            assert isinstance(entry, dict)
            for value in entry.values():
                found += pages(value) if isinstance(value, list) else [value]
        return found

    for page in pages(nav):
        built = site / (page.removesuffix(".md") + "/index.html" if page != "index.md" else "index.html")
        assert built.is_file(), f"{page} is in the nav but was not built"
    # Every page under docs/ is reachable from the nav (mkdocs only warns about the others
    # through `omitted_files`, which this makes explicit).
    written = {str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md")}
    assert written <= set(pages(nav)), f"pages missing from mkdocs.yml's nav: {sorted(written - set(pages(nav)))}"


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """The strict build with mkdocs.yml's `validation` settings is what catches a link to
    a missing anchor (mkdocs only logs those by default): shown on a two-page site."""
    import yaml

    site_config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Home\n\n[gone](other.md#no-such-step)\n", encoding="utf-8")
    (tmp_path / "docs" / "other.md").write_text("# Other\n\n## A step\n", encoding="utf-8")
    config = {"site_name": "probe", "validation": site_config["validation"], "nav": ["index.md", "other.md"]}
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "no-such-step" in done.stderr


def test_every_config_key_has_a_description() -> None:
    assert gen_reference.undocumented_keys() == []


def test_a_key_without_a_description_is_found() -> None:
    class Settings(BaseModel):
        documented: int = Field(description="what it sets")
        bare: int = 0

    class Nested(BaseModel):
        block: Settings = Field(description="a block")

    found = [key.path for key in gen_reference.schema_keys(Nested) if not key.description]
    assert found == ["block.bare"]


def test_the_config_reference_lists_every_key_and_option(site: Path) -> None:
    """Read from the built site: what the build generated is what a reader gets."""
    import html

    from piexp.config.compose import group_options
    from piexp.config.schema import RunConfig

    page = html.unescape((site / "reference" / "config" / "index.html").read_text(encoding="utf-8"))
    for key in gen_reference.schema_keys(RunConfig):
        if key.type != "block" and not key.path.startswith(("mode.", "service.", "sandbox.", "languages.")):
            assert f"<code>{key.path}</code>" in page, key.path
    for group in gen_reference.VARIANT_GROUPS:
        for name, model in gen_reference._variant_models(group).items():
            assert f"<code>{group}={name}</code>" in page
            for key in gen_reference.schema_keys(model, f"{group}."):
                assert f"<code>{key.path}</code>" in page, key.path
    for group in ("family", "reward", "limits", "model", "service", "sandbox", "algo", "mode", "experiment"):
        for option in group_options(group):
            assert f"<code>{group}={option}</code>" in page, f"{group}={option}"
    # Values come from conf/: the default model's name, and a preset's differing value.
    assert "<code>Qwen/Qwen3-4B-Instruct-2507</code>" in page
    assert "grpo: <code>0.04</code>" in page


def test_the_command_reference_is_each_parser_s_help() -> None:
    from piexp.commands import SUBCOMMANDS

    page = gen_reference.commands_page()
    for name in SUBCOMMANDS:
        assert f"## `{name}`" in page
        usage = gen_reference.subcommand_help(name)
        assert usage.startswith("usage:"), f"{name} --help printed no usage: {usage[:200]!r}"
        assert usage in page
    assert "options:" in gen_reference.subcommand_help("show")


def test_the_benchmarks_page_holds_every_bench_docstring(site: Path) -> None:
    """docs/benchmarks.md (bench/report.py's) has a section for every bench/*.py."""
    page = (site / "benchmarks" / "index.html").read_text(encoding="utf-8")
    for path in sorted((REPO / "bench").glob("*.py")):
        assert f"<code>bench/{path.name}</code></h3>" in page or f"<code>bench/{path.name}</code><a" in page, path.name


def test_the_generator_is_lint_clean() -> None:
    """docs/gen_reference.py is code beside the pages; tests/test_lint.py covers piexp,
    tests, bench and scripts, so it is checked here."""
    ruff = Path(sys.executable).parent / "ruff"
    for args in (["check"], ["format", "--check"]):
        done = subprocess.run(
            [str(ruff), *args, "--no-cache", str(DOCS / "gen_reference.py")], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout + done.stderr


def quick_start_commands() -> list[str]:
    commands = []
    for name in QUICK_START_PAGES:
        text = (DOCS / name).read_text(encoding="utf-8")
        for block in re.findall(r"```bash\n(.*?)```", text, re.S):
            for line in block.splitlines():
                if line.startswith("python -m piexp ") or line.strip() == "python -m piexp":
                    commands.append(line)
    return commands


def test_every_page_names_real_subcommands() -> None:
    """Every `python -m piexp WORD ...` on any page is a run (overrides, flags) or a
    subcommand piexp has: a renamed one cannot linger in a page no test runs."""
    from piexp.commands import SUBCOMMANDS

    subcommand_lines = 0
    for page in sorted(DOCS.rglob("*.md")):
        if page.relative_to(DOCS).as_posix() in gen_reference.PAGES:
            continue  # generated from the parsers themselves (their usage lines are not commands)
        in_code = False
        for line in page.read_text(encoding="utf-8").splitlines():
            if line.lstrip().startswith("```"):
                in_code = not in_code
                continue
            if not in_code or "python -m piexp " not in line:
                continue
            argv = shlex.split(line.partition("  #")[0])
            words = argv[argv.index("piexp") + 1 :]
            first = words[0] if words else ""
            if first and "=" not in first and not first.startswith("-"):
                assert first in SUBCOMMANDS, f"{page.name}: `{first}` is no subcommand: {line}"
                subcommand_lines += 1
    assert subcommand_lines > 20  # the pages' show, compare, rescore, ... lines were all read


def test_make_docs_builds_strictly_into_an_ignored_folder() -> None:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    recipe = makefile.split("\ndocs:", 1)[1].split("\n\n", 1)[0]
    assert "mkdocs build --strict --site-dir site" in recipe
    assert "site/" in (REPO / ".gitignore").read_text(encoding="utf-8").splitlines()


def test_the_quick_start_pages_have_commands() -> None:
    commands = quick_start_commands()
    assert any("policy=wrong" in line for line in commands)
    assert any(" compare " in line for line in commands) and any(" show " in line for line in commands)
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert "make experiment" in (DOCS / "quickstart.md").read_text(encoding="utf-8")
    assert re.search(r"^experiment:", makefile, re.M) and re.search(r"^docs:", makefile, re.M)


@pytest.mark.parametrize(
    "line", [pytest.param(line, id=f"{' '.join(line.split('  #')[0].split()[3:6])}") for line in quick_start_commands()]
)
def test_quick_start_command_composes(line: str, tmp_path: Path) -> None:
    command, _, comment = line.partition("  #")
    argv = shlex.split(command)
    subcommand = argv[3] if len(argv) > 3 else ""
    if subcommand in NEEDS_RUN_FOLDER:
        pytest.skip(f"`{subcommand}` needs a finished run folder; tests/test_readme.py's folders and tests/launch")
    if any(arg.startswith("checkpoint=") and "://" not in arg for arg in argv):
        pytest.skip("checkpoint=<run folder> needs a finished training run; tests/test_checkpoint_source.py")
    if subcommand == "tasks":
        pass  # a preview runs for real, in a second or two
    elif "--help" not in argv and "--cfg" not in argv:
        argv = [*argv, "--cfg", "job"]
    done = subprocess.run(
        [sys.executable, *argv[1:]], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"{line}\n{done.stderr[-2000:]}"
    if "--cfg" in argv:
        # A command that trains or samples on Tinker says so, so a newcomer without an
        # account knows before trying (and one that says so really does need it).
        import yaml

        first_job = re.split(r"^# sweep job [1-9]", done.stdout, flags=re.M)[0]  # a sweep prints each job's
        config = yaml.safe_load(first_job)
        mode = config["mode"]["name"]
        samples_on_tinker = config["service"]["name"] == "tinker" and (
            mode == "train" or (mode == "eval" and config["policy"] in (None, "model"))
        )
        needs_account = samples_on_tinker and "--cfg" not in command
        assert needs_account == (NEEDS_ACCOUNT in comment), f"mark it `# ... ({NEEDS_ACCOUNT})` or not: {line}"


def test_the_architecture_page_shows_the_import_contract(site: Path) -> None:
    import tomllib

    contract = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in contract["contracts"] if c["type"] == "layers"]
    page = (site / "architecture" / "index.html").read_text(encoding="utf-8")
    assert gen_reference.LAYERS_MARKER not in page
    table = gen_reference.layers_table()
    rows = table.splitlines()[2:]
    # Each layer says what it holds (the last column; the modules column escapes its `|`).
    assert len(rows) == len(layers) and all(row.rsplit("|", 2)[1].strip() for row in rows), table
    for layer in layers:
        for module in layer.split("|"):
            assert f"<code>{module.strip().removeprefix('piexp.')}</code>" in page, module


def test_the_security_page_shows_the_sandbox_protocol(site: Path) -> None:
    from dataclasses import fields

    from piexp.sandbox.protocol import RunCodeRequest
    from piexp.sandbox.settings import SandboxSettings

    page = (site / "security" / "index.html").read_text(encoding="utf-8")
    assert gen_reference.PROTOCOL_MARKER not in page
    for name in [*RunCodeRequest.model_fields, *(field.name for field in fields(SandboxSettings))]:
        assert f"<code>{name}</code>" in page, name

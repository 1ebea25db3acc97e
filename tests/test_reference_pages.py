"""The configuration and command references are files in docs/ (docs/reference/), so a
fresh clone reads them, from the README's links, without building the site: they are
what docs/gen_reference.py generates from piexp now (the schema, conf/, each command's
parser), and a change to any of those that leaves them stale fails here. Every family
option that is another name for a family (`family=graph`) is said so in the docs."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
REGENERATE = "python docs/gen_reference.py (writes docs/reference/config.md and commands.md)"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference", DOCS / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


gen_reference = _generator()


@pytest.mark.parametrize("page", sorted(gen_reference.PAGES))
def test_the_reference_page_in_docs_is_what_piexp_generates_now(page: str) -> None:
    written = (DOCS / page).read_text(encoding="utf-8") if (DOCS / page).is_file() else ""
    assert written == gen_reference.PAGES[page](), f"docs/{page} is stale: run {REGENERATE}"


def test_the_readme_links_the_reference_pages_in_the_clone() -> None:
    """The README pointed to `site/reference/...`, which exists only after `make docs`."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    for page in gen_reference.PAGES:
        assert f"docs/{page}" in links, f"the README does not link docs/{page}"
        assert (REPO / "docs" / page).is_file()
    assert "site/reference" not in readme


def test_every_family_alias_is_documented() -> None:
    """`family=graph` selects `graph_paths` (conf/family/graph.yaml) and was in no page:
    a family option that is not a family of its own (besides `all`) is named in
    docs/concepts.md with the family it means."""
    concepts = " ".join((DOCS / "concepts.md").read_text(encoding="utf-8").split())
    families = {path.stem for path in (REPO / "conf" / "family").glob("*.yaml")}
    for path in sorted((REPO / "conf" / "family").glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if path.stem == "all" or path.stem in data:
            continue
        (meant,) = [name for name in data.get("defaults", []) if name in families]
        assert f"`family={path.stem}` is another name for `{meant}`" in concepts, path

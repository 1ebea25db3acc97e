"""The language registry (`piexp.languages`) is the one home of what piexp knows about a
language: every configured language resolves through it, the sandbox runs each under the
registry's protocol id, and no other module keeps a per-language table of its own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from pygments.lexers import get_lexer_by_name

from piexp.config.compose import load
from piexp.errors import UserError
from piexp.languages import LANGUAGES, language, language_of_path
from piexp.sandbox.protocol import PROTOCOL_LANGUAGES
from piexp.tasks import FAMILIES, reference_solution

ROOT = Path(__file__).resolve().parents[1]
LANGUAGE_CONFIGS = sorted((ROOT / "conf" / "languages").glob("*.yaml"))


@pytest.mark.parametrize("path", LANGUAGE_CONFIGS, ids=lambda p: p.name)
def test_every_configured_language_resolves_through_the_registry(path: Path) -> None:
    configured = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert configured, f"{path} configures no language"
    for name, settings in configured.items():
        spec = language(name)
        assert "sandbox_language" not in settings, "the sandbox id is the registry's, not configured"
        assert spec.sandbox_id in PROTOCOL_LANGUAGES, f"the sandbox cannot run {spec.sandbox_id}"
        assert language_of_path(settings["filename"]) is spec, f"{settings['filename']} is not a {name} file"


def test_every_registry_language_has_references_a_lexer_and_a_sandbox_runtime() -> None:
    for spec in LANGUAGES.values():
        assert spec.sandbox_id in PROTOCOL_LANGUAGES
        assert get_lexer_by_name(spec.name)  # `piexp show` highlights code by registry name
        for family in FAMILIES:
            assert reference_solution(family, spec.name).strip()


def test_an_unknown_language_is_a_user_error_naming_the_valid_ones() -> None:
    with pytest.raises(UserError, match="unknown language 'cobol'; valid languages: python, javascript, julia"):
        language("cobol")


def test_the_config_refuses_a_language_the_registry_lacks() -> None:
    with pytest.raises(UserError, match=r"languages\.ruby is not a language piexp knows"):
        load(["mode=check", "+languages.ruby.runtimes=[ruby]", "+languages.ruby.filename=solution.rb"])


def test_the_config_refuses_a_sandbox_id_other_than_the_registrys() -> None:
    with pytest.raises(
        UserError,
        match=r"languages\.javascript\.sandbox_language=node differs .* \(nodejs\); "
        r"that id is fixed by the language registry",
    ):
        load(["mode=check", "+languages.javascript.sandbox_language=node"])


def test_the_sandbox_id_is_derived_and_an_old_config_spelling_it_out_is_the_same_run() -> None:
    derived = load(["mode=check"])
    assert {name: spec.sandbox_language for name, spec in derived.languages.items()} == {
        name: LANGUAGES[name].sandbox_id for name in derived.languages
    }
    spelled_out = load(["mode=check", "+languages.javascript.sandbox_language=nodejs"])
    assert spelled_out.model_dump(mode="json") == derived.model_dump(mode="json")


def test_no_module_but_the_registry_keeps_a_per_language_table() -> None:
    # A dict literal keyed by `"javascript"` (piexp's name; SandboxFusion says `nodejs`,
    # so the sandbox's own table of protocol ids is not one) is a second language table;
    # the tables this replaced are named too, so that they cannot come back.
    keyed = re.compile(r"""(?m)(?:^|[{,])\s*["']javascript["']\s*:""")
    old_names = re.compile(r"\b(PIEXP_TO_SANDBOX_LANGUAGE|REFERENCE_EXTENSIONS|HELLO_PROGRAMS|EXTENSIONS|_LEXERS)\b")
    offenders = []
    for path in sorted((ROOT / "piexp").rglob("*.py")):
        if path.name == "languages.py" and path.parent.name == "piexp":
            continue
        text = path.read_text(encoding="utf-8")
        if keyed.search(text) or old_names.search(text):
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []

"""The check that ties `conf/languages/*.yaml` to the language registry: every configured
language must be one piexp knows (`piexp.languages`), and a `sandbox_language` (no longer
configured: the registry's protocol id is used, but configs saved by earlier piexp
versions spell it out) must be the registry's, so that the mapping from piexp's names to
SandboxFusion's ids has one home."""

from __future__ import annotations

from collections.abc import Mapping

from piexp.config.schema import LanguageSettings
from piexp.errors import UserError
from piexp.languages import LANGUAGES


def check_configured_languages(languages: Mapping[str, LanguageSettings]) -> None:
    """Refuse, as one user error, a configured language the registry lacks or whose
    sandbox id differs from the registry's."""
    problems = []
    for name, settings in languages.items():
        known = LANGUAGES.get(name)
        if known is None:
            problems.append(
                f"languages.{name} is not a language piexp knows (valid languages: "
                f"{', '.join(LANGUAGES)}; a new one needs reference programs and an entry in "
                "piexp/languages.py)"
            )
        elif settings.sandbox_language not in (None, known.sandbox_id):
            problems.append(
                f"languages.{name}.sandbox_language={settings.sandbox_language} differs from "
                f"the sandbox id piexp runs {name} under ({known.sandbox_id}); that id is fixed "
                "by the language registry (piexp/languages.py), so remove the setting (it is "
                "only accepted, equal to the registry's, from configs saved by earlier piexp)"
            )
    if problems:
        raise UserError("Invalid configuration: " + "; ".join(problems) + ".")

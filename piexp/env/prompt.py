"""The user prompt of an episode: language, instruction, files, file to write, command."""

from __future__ import annotations

from piexp.config.schema import LanguageSettings
from piexp.tasks import Task


def workspace_prompt(task: Task, language_name: str, language: LanguageSettings) -> str:
    files = "\n".join(f"- `{name}`" for name in sorted(task.files))
    return f"""Use {language_name} to complete this workspace task.

{task.instruction}

Available files:
{files}

Use the file tools to inspect inputs and write `{language.filename}`. Execute it with exactly `{language.command}`. Use the execution output to verify the result, then state the final integer in your response. Work only with relative paths in this workspace."""

"""Tool-call failure metrics: what counts as each failure, per-episode counts, and their
aggregation (counts and rates per family x language) for results.json, results.md,
check.json, the viewer and `summarize`.

Each kind is read from what the env and the renderer left behind, never guessed from text
the model wrote: the transitions' metrics (the cookbook's `parse_error` flag, set for a
structural failure, `ParseTermination.MALFORMED`, and for a content failure, a message
with `unparsed_tool_calls`), the tool result messages (the cookbook's own error results
for unknown tools and bad arguments, the workspace tools' `status`), and the stop reason.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# Kind -> what counts as one (the `count` of a kind adds these up; its `episodes` counts
# the episodes with at least one).
FAILURE_KINDS: dict[str, str] = {
    "parse_error": "a turn the renderer could not parse: broken framing (no clean stop, "
    "ParseTermination malformed) or a malformed tool call in it (unparsed_tool_calls: "
    "bad JSON, missing fields, unterminated tag)",
    "unknown_tool": "a parsed call naming a tool that does not exist (result 'Tool ... not found')",
    "invalid_arguments": "a call whose arguments are not JSON or do not fit the tool's schema "
    "('Failed to parse tool arguments', 'Parameter validation failed')",
    "refused_command": "a bash call the workspace refused (status error: not '<runtime> <file>', "
    "file missing, or not written or edited first)",
    "tool_error": "a read, write or edit call that failed (status error: file not found, path denied, "
    "oldText not matching once)",
    "context_overflow": "an episode stopped because the conversation would outgrow its token budget, "
    "limits.max_trajectory_tokens (stop reason context_overflow)",
    "max_tokens": "an episode stopped because a turn reached the generation limit, "
    "limits.max_generation_tokens, before it ended (stop reason max_tokens; also a prompt too long to start)",
    "max_turns": "an episode stopped at the turn limit (stop reason max_turns)",
    "max_tool_calls": "an episode stopped at the tool-call limit (stop reason max_tool_calls)",
}
_STOP_KINDS = {
    "context_overflow": "context_overflow",
    "max_tokens": "max_tokens",
    "max_turns": "max_turns",
    "max_tool_calls": "max_tool_calls",
}
_ARGUMENT_ERRORS = ("Failed to parse tool arguments", "Parameter validation failed")


def _tool_outcome(message: Mapping[str, Any]) -> str | None:
    """The failure kind of one tool result message, or None."""
    content = message.get("content")
    if not isinstance(content, str):
        return None
    try:
        payload = json.loads(content)
    except ValueError:
        return None
    if not isinstance(payload, dict):
        return None
    if "schema" not in payload:
        error = str(payload.get("error") or "")
        if error.startswith("Tool '") and error.endswith("not found"):
            return "unknown_tool"
        if error.startswith(_ARGUMENT_ERRORS):
            return "invalid_arguments"
        return None
    if payload.get("status") != "error":
        return None
    return "refused_command" if payload.get("tool") == "bash" else "tool_error"


def count_failures(
    history: Sequence[Mapping[str, Any]], transition_metrics: Iterable[Mapping[str, Any]], stop_reason: str | None
) -> dict[str, int]:
    """Per-episode counts of every kind, plus `calls`: the tool calls the model attempted
    (parsed or not), the denominator of the call-level rates."""
    counts = dict.fromkeys(FAILURE_KINDS, 0)
    counts["calls"] = 0
    for metrics in transition_metrics:
        counts["parse_error"] += int(bool(metrics.get("parse_error")))
    for message in history:
        role = message.get("role")
        if role == "assistant":
            counts["calls"] += len(message.get("tool_calls") or []) + len(message.get("unparsed_tool_calls") or [])
        elif role == "tool":
            kind = _tool_outcome(message)
            if kind:
                counts[kind] += 1
    stop_kind = _STOP_KINDS.get(str(stop_reason))
    if stop_kind:
        counts[stop_kind] += 1
    return counts


def summarize_failures(per_episode: Iterable[Mapping[str, int] | None]) -> dict[str, Any]:
    """{episodes, calls, kinds: {kind: {count, episodes, rate}}}; `rate` is the share of
    episodes with at least one, `per_call` (call-level kinds) the count per attempted call."""
    rows = [row or {} for row in per_episode]
    total = len(rows)
    calls = sum(int(row.get("calls", 0)) for row in rows)
    kinds: dict[str, dict[str, float]] = {}
    for kind in FAILURE_KINDS:
        count = sum(int(row.get(kind, 0)) for row in rows)
        hit = sum(1 for row in rows if row.get(kind))
        kinds[kind] = {"count": count, "episodes": hit, "rate": hit / total if total else 0.0}
        if kind in ("unknown_tool", "invalid_arguments", "refused_command", "tool_error"):
            kinds[kind]["per_call"] = count / calls if calls else 0.0
    return {"episodes": total, "calls": calls, "kinds": kinds}


def failure_cells(records: Sequence[Any], families: Sequence[str], languages: Sequence[str]) -> dict[str, Any]:
    """summarize_failures per family x language (records need family, language, failures)."""
    return {
        family: {
            language: summarize_failures(r.failures for r in records if r.family == family and r.language == language)
            for language in languages
        }
        for family in families
    }


def failure_markdown(overall: Mapping[str, Any], cells: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> str:
    """The results.md section: episodes affected (and rate) per kind, overall and per cell,
    then what counts as each kind."""
    kinds = list(FAILURE_KINDS)

    def cell_text(summary: Mapping[str, Any], kind: str) -> str:
        entry = summary["kinds"][kind]
        return f"{entry['count']} ({entry['rate']:.0%})" if entry["count"] else "0"

    lines = [
        "## Tool-call failures",
        "",
        "Events per kind, with the share of episodes that had at least one in brackets.",
        "",
        "| family | language | episodes | calls | " + " | ".join(kinds) + " |",
        "|---|---|---|---|" + "---|" * len(kinds),
    ]
    rows = [(family, language, summary) for family, row in cells.items() for language, summary in row.items()]
    rows.append(("all", "all", overall))
    for family, language, summary in rows:
        lines.append(
            f"| {family} | {language} | {summary['episodes']} | {summary['calls']} | "
            + " | ".join(cell_text(summary, kind) for kind in kinds)
            + " |"
        )
    lines += ["", "What counts as each:", ""]
    lines += [f"- `{kind}`: {meaning}." for kind, meaning in FAILURE_KINDS.items()]
    return "\n".join(lines) + "\n"


def failure_digest(summary: Mapping[str, Any] | None) -> str:
    """One short line for tables (summarize): the kinds that occurred, with counts."""
    if not summary:
        return ""
    parts = [f"{kind} {entry['count']}" for kind, entry in summary.get("kinds", {}).items() if entry.get("count")]
    return ", ".join(parts) or "none"

"""Each observation after the first is the previous observation, the tokens the model
sampled, and the rendering of what came after them: the model sees its own turns as it
wrote them, not as the chat template would write their parsed messages again. With
tinker-cookbook 0.5.8's Qwen3 renderers the two differ for every turn of text before a
tool call (the parsed text keeps the newline the renderer writes before `<tool_call>`,
and the renderer writes it again), and a sampled tokenization need not be the one the
tokenizer would choose; either way the cookbook's `trajectory_to_data` (which merges the
turns of an episode only while each observation extends the previous one) trains every
turn as a separate sequence carrying the whole history again. Where the renderer does not
itself extend the conversation through the sampled turn (a template that rewrites its
history, such as one dropping earlier thinking), the canonical rendering stands and the
trainer splits the sequence as before."""

from __future__ import annotations

from collections.abc import Sequence

import tinker
from tinker_cookbook import renderers
from tinker_cookbook.renderers.base import Message


def spliced_observation(
    renderer: renderers.Renderer,
    messages: Sequence[Message],
    rendered: tinker.ModelInput,
    seen: tinker.ModelInput,
    action: Sequence[int],
) -> tinker.ModelInput | None:
    """The next observation as `seen` (the observation the action was sampled from) +
    `action` + what `rendered` (the canonical rendering of `messages`, which end with
    that action's parsed message and what followed it) has after the action's message.
    None when that cannot be told apart exactly: the action did not end with a stop
    token, or the canonical rendering does not begin with the conversation through the
    action's message."""
    stops = [s for s in renderer.get_stop_sequences() if isinstance(s, int)]
    if not action or action[-1] not in stops:
        return None
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=None)
    if last is None:
        return None
    through = renderer.build_generation_prompt(list(messages[: last + 1])).to_ints()
    # The conversation through the action's message ends at its stop token; the
    # generation prompt after it never contains one.
    end = max((i for i, t in enumerate(through) if t == action[-1]), default=None)
    full = rendered.to_ints()
    if end is None or full[: end + 1] != through[: end + 1]:
        return None
    return tinker.ModelInput.from_ints([*seen.to_ints(), *action, *full[end + 1 :]])

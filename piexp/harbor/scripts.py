"""The two scripts of an exported Harbor task: `solution/solve.sh` (the oracle: piexp's
reference program, run the way the instruction asks) and `tests/test.sh` (the verifier:
piexp's binary reward, graded from what the agent left in the working folder).

piexp grades an episode from its conversation: a write or edit succeeded, a run of the
program exited 0, that run's last non-empty stdout line is the answer, and the last integer
of the final message is the answer. A Harbor verifier sees only the container after the
agent, so each step becomes a fact about the working folder: the solution file exists,
running it with the instruction's command exits 0, its last non-empty stdout line is the
answer, and `answer.txt` (the agent's stated answer) has the answer as its last integer.
The reward is 1 when all four hold, else 0; the verifier writes `/logs/verifier/reward.json`
with the reward and the four steps. Everything it runs is in the task's image (bash, grep,
sed, timeout and the language's runtime): nothing is fetched at verify time."""

from __future__ import annotations

# Where the workspace lies in the container, and the file holding the stated answer.
WORKDIR = "/app"
ANSWER_FILE = "answer.txt"
# Seconds the verifier gives one run of the agent's program.
RUN_TIMEOUT_S = 60
VERIFIER_LOGS = "/logs/verifier"
# piexp's step metrics (piexp.env.reward), as reward.json names them.
STEP_METRICS = (
    "mutation_succeeded",
    "execution_succeeded",
    "execution_output_correct",
    "response_answer_correct",
    "functional_correct",
)

# The last non-empty line of a file, stripped (piexp.env.tools.last_nonempty_line).
_LAST_LINE = "sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' \"$1\" | grep -v '^$' | tail -n 1"


def _heredoc_end(text: str) -> str:
    end = "PIEXP_REFERENCE"
    while end in text.splitlines():
        end += "_END"
    return end


def solve_script(reference: str, filename: str, command: str) -> str:
    """solve.sh: write the reference program, run it, state its answer."""
    program = reference if reference.endswith("\n") else reference + "\n"
    end = _heredoc_end(program)
    return f"""#!/bin/bash
# The oracle: piexp's reference program for this task, run as the instruction asks,
# its last output line stated in {ANSWER_FILE}.
set -euo pipefail
last_line() {{ {_LAST_LINE}; }}
cd {WORKDIR}
cat > {filename} <<'{end}'
{program}{end}
{command} > /tmp/piexp-reference-stdout.txt
last_line /tmp/piexp-reference-stdout.txt > {ANSWER_FILE}
"""


def test_script(answer: str, filename: str, command: str) -> str:
    """test.sh: piexp's binary reward and its step metrics, into reward.json. Without a
    working folder it writes no reward (Harbor records that as the verifier's failure)."""
    metrics = ", ".join(f'"{name}": %s' for name in STEP_METRICS)
    values = " ".join(f'"${name}"' for name in ("mutation", "executed", "output", "stated", "passed"))
    return f"""#!/bin/bash
# The verifier: piexp's binary reward. 1 when {filename} exists, `{command}` exits 0
# within {RUN_TIMEOUT_S} s, its last non-empty stdout line is the answer, and the last
# integer in {ANSWER_FILE} is the answer; else 0. Writes {VERIFIER_LOGS}/reward.json.
set -u
expected='{answer}'
logs={VERIFIER_LOGS}
mkdir -p "$logs"
cd {WORKDIR} || exit 1
last_line() {{ {_LAST_LINE}; }}
mutation=0 executed=0 output=0 stated=0
if [ -f {filename} ]; then
  mutation=1
  if timeout {RUN_TIMEOUT_S} {command} > "$logs/program_stdout.txt" 2> "$logs/program_stderr.txt" < /dev/null; then
    executed=1
    if [ "$(last_line "$logs/program_stdout.txt")" = "$expected" ]; then output=1; fi
  fi
fi
if [ -f {ANSWER_FILE} ]; then
  # The last integer not inside a word, as piexp reads a final message.
  said=$(grep -oP '(?<![A-Za-z0-9_])-?[0-9]+(?![A-Za-z0-9_])' {ANSWER_FILE} | tail -n 1)
  if [ "$said" = "$expected" ]; then stated=1; fi
fi
passed=$((mutation * executed * output * stated))
printf '{{"reward": %s, {metrics}}}\\n' "$passed" {values} > "$logs/reward.json"
"""

"""Harnesses: the agent that plays each episode (docs/harness.md). `builtin` is the
reference environment; `pi` the real Pi coding agent in piexp's sandbox. The interface
is `piexp.harness.base.Harness` (this package imports nothing itself, so the installer,
`python -m piexp.harness.pi`, starts without the RL stack)."""

"""piexp: declarative RL experiments for coding agents in a Pi-shaped code harness."""

__version__ = "0.1.0"

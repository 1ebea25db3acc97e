"""Subcommands of `python -m piexp` that are not Hydra runs."""

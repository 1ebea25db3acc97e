"""Launching runs: splits, sandbox, train, eval, check, manifests."""

"""Configuration: Hydra composition, command-line rewriting and the typed run model."""

"""Command-line subcommands of ``python -m helix_jax``."""

"""The verl backend: the `train_grpo` command (``command``), its validation, the training wrapper and the
multi-node Ray launcher.

Importing this package (or ``command``, ``overrides``, ``checks``) never imports verl, Hydra or Ray: the
Snakefile composes commands and runs the cheap checks on every dry-run. Only ``validate`` (the full check
against verl's real Hydra schema) and the training wrapper's subprocesses need verl installed.
"""

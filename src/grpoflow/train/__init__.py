"""GRPO training: the command train_grpo runs (`command`), the TRL backend and the verl backend."""

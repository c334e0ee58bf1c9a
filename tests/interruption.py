"""A killed training run, for the resume tests: ``Crash(at_step)`` raises as that step begins.

KeyboardInterrupt, as a user's Ctrl-C or a worker's SIGINT would raise it, so the trainer saves
nothing more and the test resumes from the last checkpoint the run wrote.
"""

from __future__ import annotations

from transformers import TrainerCallback


class Crash(TrainerCallback):
    """Raises KeyboardInterrupt once training reaches ``at_step``."""

    def __init__(self, at_step: int):
        self.at_step = at_step

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.at_step:
            raise KeyboardInterrupt(f"simulated interruption at step {state.global_step}")

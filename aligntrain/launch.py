"""Several processes for one training stage: ``accelerate launch`` started by the stage's own command.

A DVC stage runs one command. With ``launch.num_processes`` > 1 the training stages (pretrain,
warmup, train) re-run themselves under ``accelerate launch``: the command DVC (or a Prefect
worker) started becomes the launcher, each process trains its shard of every batch, and process
0 alone logs to MLflow and writes the stage's outputs (the final save gathers a sharded model
first: ``training.schedule.finish_run``). DVC sees one command that exits when every process has.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

#: Set in the launched processes' environment: they run the stage instead of launching again.
LAUNCHED = "ALIGNTRAIN_LAUNCHED"


def launched() -> bool:
    """Whether this process is one of a launch's processes (and must not launch again)."""
    return os.environ.get(LAUNCHED) == "1"


def main_process() -> bool:
    """Process 0 of a launch, or the only process: the one that writes outputs and logs (torchrun's RANK)."""
    return int(os.environ.get("RANK", "0")) == 0


def launch_command(
    num_processes: int, config_file: Path | None, threads: int, module_args: list[str], port: int
) -> list[str]:
    """The ``accelerate launch`` command that runs ``python -m aligntrain.cli <module_args>`` on each process.

    Without a config file the processes form one data-parallel group (accelerate's
    ``--multi_gpu``; on a machine without CUDA the trainers' ``use_cpu`` makes it a gloo
    group). A config file (the repository's ``accelerate/``: ddp, fsdp2, zero2, zero3) picks
    the sharding; ``num_processes`` overrides the file's. ``port``: the group's rendezvous,
    free on this machine, so that two stages launched side by side do not collide.
    """
    command = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(num_processes)]
    command += ["--config_file", str(config_file)] if config_file is not None else ["--multi_gpu"]
    if threads:
        command += ["--num_cpu_threads_per_process", str(threads)]
    return [*command, "--main_process_port", str(port), "-m", "aligntrain.cli", *module_args]


def free_port() -> int:
    """A TCP port no one listens on now (the kernel's pick)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def relaunch(command: list[str]) -> None:
    """Replace this process by ``command``, marked as launched; its exit status is the stage's."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(command[0], command, {**os.environ, LAUNCHED: "1"})

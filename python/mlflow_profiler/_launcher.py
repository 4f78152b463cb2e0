"""`mlflow-profiler-run [options] command ...`: runs a command with
autoprofile switched on through the environment, the way
`opentelemetry-instrument` works. The command's Python must have
mlflow-profiler installed (its .pth hook does the rest)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from typing import List, Optional


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mlflow-profiler-run",
        description="Run a command (e.g. `mlflow models serve ...`) with every MLflow pyfunc predict "
        "profiled. Options set the MLFLOW_PROFILER_* variables (docs/autoprofile.md).",
    )
    p.add_argument("--depth", help="depth ceiling (-1: unlimited) [MLFLOW_PROFILER_DEPTH]")
    p.add_argument(
        "--sample-rate", help="fraction of calls profiled, in [0, 1] [MLFLOW_PROFILER_SAMPLE_RATE]"
    )
    p.add_argument("--capture-io", action="store_true", help="summarize inputs and outputs")
    p.add_argument(
        "--log-to-mlflow", action="store_true", help="log each profile to MLflow (background)"
    )
    p.add_argument(
        "--log-as-trace", action="store_true", help="also record each profile as an MLflow trace"
    )
    p.add_argument("--output-dir", help="write each profile to this directory")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command to run")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    """Sets the environment and replaces this process with the command."""
    from . import _env

    args = _parser().parse_args(argv)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        _parser().error(
            "give the command to run, e.g. mlflow-profiler-run --sample-rate 0.1 -- mlflow models serve ..."
        )
    # Each flag checked by the rule of the variable it sets, named as typed.
    for value, flag, parse in (
        (args.depth, "--depth", _env.parse_depth),
        (args.sample_rate, "--sample-rate", _env.parse_rate),
    ):
        if value is not None:
            try:
                parse(flag, value)
            except _env.EnvError as exc:
                _parser().error(str(exc))
    env = dict(os.environ)
    env["MLFLOW_PROFILER_AUTOPROFILE"] = "1"
    for value, name in (
        (args.depth, "MLFLOW_PROFILER_DEPTH"),
        (args.sample_rate, "MLFLOW_PROFILER_SAMPLE_RATE"),
        (args.output_dir, "MLFLOW_PROFILER_OUTPUT_DIR"),
    ):
        if value is not None:
            env[name] = str(value)
    for flag, name in (
        (args.capture_io, "MLFLOW_PROFILER_CAPTURE_IO"),
        (args.log_to_mlflow, "MLFLOW_PROFILER_LOG_TO_MLFLOW"),
        (args.log_as_trace, "MLFLOW_PROFILER_LOG_AS_TRACE"),
    ):
        if flag:
            env[name] = "1"
    try:
        _env.read(env)
    except _env.EnvError as exc:
        print(f"mlflow-profiler-run: {exc}", file=sys.stderr)
        return 2
    program = shutil.which(command[0], path=env.get("PATH"))
    if program is None:
        print(f"mlflow-profiler-run: command not found: {command[0]}", file=sys.stderr)
        return 127
    os.execve(program, command, env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())

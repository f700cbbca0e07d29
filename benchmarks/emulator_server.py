"""A local emulated vLLM server (lab/emulator) as a subprocess, for the accuracy benchmark and tests.

Single process, TP 2 on two emulated GPUs (mp backend, one node): no Ray, no GPU, no root.
Always killed (its whole process group) on exit from the `with` block.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODEL = "Qwen/Qwen3.5-122B-A10B-FP8"
READY = "Application startup complete."


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EmulatorServer:
    def __init__(
        self,
        profile: str,
        *,
        served_name: str = "qwen",
        reasoning_parser: str | None = None,
        extra_args: tuple[str, ...] = (),
        time_scale: float = 0.003,
        startup_timeout: float = 60.0,
    ):
        self.profile = profile
        self.served_name = served_name
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.args = [
            MODEL,
            "-tp",
            "2",
            "--served-model-name",
            served_name,
            "--max-model-len",
            "32768",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *extra_args,
        ]
        if reasoning_parser:
            self.args += ["--reasoning-parser", reasoning_parser]
        self.env = {
            "PYTHONPATH": str(REPO / "lab"),
            "SPARK_EMU_PROFILE": profile,
            "SPARK_EMU_TIME_SCALE": str(time_scale),
            "SPARK_EMU_GPUS": "2",
            "SPARK_EMU_STATE_DIR": "/tmp/spark-bench-emu",
        }
        self.startup_timeout = startup_timeout
        self.lines: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> EmulatorServer:
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("SPARK_EMU_", "NCCL_", "RAY_"))
        }
        env.update(self.env)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "emulator", "vllm", "serve", *self.args],
            env=env,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        threading.Thread(target=self._read, daemon=True).start()
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _read(self) -> None:
        assert self.process and self.process.stdout
        for raw in iter(self.process.stdout.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.lines.append(line)
            self._lines.put(line)
        self.process.stdout.close()  # the output ended: the pipe is this thread's to close
        self._lines.put(None)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(
                    f"emulator ({self.profile}) not ready within {self.startup_timeout:.0f} s:\n"
                    + "\n".join(self.lines[-20:])
                )
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise RuntimeError(
                    f"emulator ({self.profile}) exited before ready:\n"
                    + "\n".join(self.lines[-20:])
                )
            if READY in line:
                return

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

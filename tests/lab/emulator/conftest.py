"""Helpers: run the emulator as real subprocesses and wait for lines with deadlines."""

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
LAB = os.path.join(REPO, "lab")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Proc:
    def __init__(self, args, env=None, name="emu"):
        e = dict(os.environ)
        e["PYTHONPATH"] = LAB
        e.setdefault("SPARK_EMU_TIME_SCALE", "0.01")
        e.setdefault("SPARK_EMU_PROFILE", "fast-test")
        e.setdefault("SPARK_EMU_DEAD_LINGER_S", "1")
        for k in ("SPARK_EMU_FAULT", "NCCL_DEBUG", "VLLM_HOST_IP", "RAY_ADDRESS"):
            e.pop(k, None)
        e.update(env or {})
        self.name = name
        self.p = subprocess.Popen(
            [sys.executable, "-m", "emulator", *list(args)],
            env=e,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.lines = []
        self.q = queue.Queue()
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for raw in iter(self.p.stdout.readline, b""):
            line = ANSI.sub("", raw.decode("utf-8", "replace").rstrip("\n"))
            self.lines.append(line)
            self.q.put(line)
        self.p.stdout.close()  # the process has ended its output: the pipe is this thread's to close
        self.q.put(None)

    def wait_for(self, text, timeout=20.0):
        """Return the first line containing `text` (from the start of the output)."""
        deadline = time.monotonic() + timeout
        idx = 0
        while True:
            while idx < len(self.lines):
                if text in self.lines[idx]:
                    return self.lines[idx]
                idx += 1
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    "%s: %r not seen within %.1fs; output tail:\n%s"
                    % (self.name, text, timeout, "\n".join(self.lines[-40:]))
                )
            try:
                item = self.q.get(timeout=min(left, 0.2))
            except queue.Empty:
                continue
            if item is None and idx >= len(self.lines):
                raise AssertionError(
                    "%s exited (rc=%s) before %r; tail:\n%s"
                    % (self.name, self.p.poll(), text, "\n".join(self.lines[-40:]))
                )

    def wait_exit(self, timeout=20.0):
        rc = self.p.wait(timeout=timeout)
        self.t.join(timeout=5)
        return rc

    @property
    def text(self):
        return "\n".join(self.lines)

    def kill(self, sig=signal.SIGKILL):
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, sig)
            except ProcessLookupError:
                pass
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


@pytest.fixture
def spawn():
    procs = []

    def _spawn(args, env=None, name="emu"):
        p = Proc(args, env, name)
        procs.append(p)
        return p

    yield _spawn
    for p in procs:
        p.kill()

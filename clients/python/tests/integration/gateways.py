"""`ferrobay s3 run` processes for the integration tests: started on loopback over shared
shard-store directories and one PostgreSQL index, killed with SIGKILL by pid, restarted
on the same port (or a new one)."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import List, Optional

ACCESS_KEY = "ferrobay-root"
SECRET_KEY = "ferrobay-root-secret"
START_TIMEOUT_S = 60
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # The kernel kills the gateway if the test process dies first.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


class Gateway:
    def __init__(self, binary: str, meta: str, store_dirs: List[Path], work: Path, name: str):
        self.binary = binary
        self.meta = meta
        self.store_dirs = store_dirs
        self.work = work
        self.name = name
        self.endpoints_file = work / f"{name}.json"
        self.log_path = work / f"{name}.log"
        self.proc: Optional[subprocess.Popen] = None
        self.url = ""
        self.port = 0

    def start(self, port: Optional[int] = None) -> None:
        """Starts the gateway (on ``port``, default: the port it had, or a free one) and
        waits until it serves."""
        port = self.port if port is None else port
        last = ""
        for _ in range(10):  # the old port may still be held for a moment
            try:
                self._start_once(port)
                return
            except RuntimeError as e:
                last = str(e)
                if "in use" not in last.lower():
                    raise
                time.sleep(0.5)
        raise RuntimeError(last)

    def _start_once(self, port: int) -> None:
        if self.endpoints_file.exists():
            self.endpoints_file.unlink()
        args = [self.binary, "s3", "run", "--listen", f"127.0.0.1:{port}", "--index", self.meta,
                "--endpoints-file", str(self.endpoints_file)]
        for i, d in enumerate(self.store_dirs, start=1):
            args += ["--store", f"s{i}={d}"]
        env = dict(os.environ, FERROBAY_S3_ACCESS_KEY=ACCESS_KEY, FERROBAY_S3_SECRET_KEY=SECRET_KEY)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=log,
                                     preexec_fn=_die_with_parent)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                addr = json.loads(self.endpoints_file.read_text())["s3"]
                self.url = f"http://{addr}"
                self.port = int(addr.rsplit(":", 1)[1])
                return
            except (OSError, ValueError, KeyError):
                pass
            code = self.proc.poll()
            if code is not None:
                raise RuntimeError(f"gateway {self.name} exited with {code}: {self.log_tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"gateway {self.name} did not come up: {self.log_tail()}")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL by pid, as a crash or an OOM kill would end it."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

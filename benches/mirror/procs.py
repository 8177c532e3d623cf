"""Child processes of the bench, and what /proc says about them.

Every process the harness starts goes through `Registry.spawn`, in its own session (so a Ctrl-C in the terminal
reaches only the harness, which then stops the children in order), and is stopped by its pid only. `Registry.stop_all`
runs on normal exit, on errors and on SIGINT/SIGTERM.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


class Registry:
    """The live children of this harness."""

    def __init__(self) -> None:
        self._procs: dict[int, tuple[str, subprocess.Popen]] = {}
        self._lock = threading.Lock()

    def spawn(
        self,
        name: str,
        cmd: list[str],
        log: Path,
        *,
        stdout_pipe: bool = False,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> subprocess.Popen:
        """Starts `cmd`; stderr (and stdout unless piped) go to `log`."""
        log.parent.mkdir(parents=True, exist_ok=True)
        logf = open(log, "ab")  # noqa: SIM115 - handed to the child, closed right after the fork
        logf.write(f"# {time.strftime('%H:%M:%S')} {' '.join(cmd)}\n".encode())
        logf.flush()
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE if stdout_pipe else logf,
            stderr=logf,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,
            text=stdout_pipe,
            bufsize=1 if stdout_pipe else -1,
        )
        logf.close()  # the child holds its own descriptor
        with self._lock:
            self._procs[proc.pid] = (name, proc)
        return proc

    def stop(self, proc: subprocess.Popen, timeout: float = 30.0, sig: int = signal.SIGTERM) -> float:
        """Sends `sig` to the process (by pid), SIGKILL after `timeout`; returns seconds until it was gone."""
        start = time.monotonic()
        if proc.poll() is None:
            try:
                os.kill(proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                try:
                    os.kill(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
        with self._lock:
            self._procs.pop(proc.pid, None)
        if proc.stdout is not None:
            proc.stdout.close()
        return time.monotonic() - start

    def forget(self, proc: subprocess.Popen) -> None:
        """Drops a process that exited by itself."""
        with self._lock:
            self._procs.pop(proc.pid, None)

    def stop_all(self) -> None:
        """SIGTERM to every live child, then SIGKILL to whatever is left after 15 s."""
        with self._lock:
            procs = list(self._procs.values())
            self._procs.clear()
        for _, proc in procs:
            if proc.poll() is None:
                try:
                    os.kill(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 15
        for _, proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.kill(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of the whole process (all its threads), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode()
    except OSError:
        return None
    # comm (field 2) may contain spaces: the fields we want follow the last ')'. utime/stime are fields 14/15.
    rest = stat[stat.rindex(")") + 2 :].split()
    return (int(rest[11]) + int(rest[12])) / CLK_TCK


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent not idle (all cores, from /proc/stat), to measure interference."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal (guest time is already inside user)
    return (sum(fields[:8]) - fields[3] - fields[4]) / CLK_TCK


def load_average() -> float:
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def vm_hwm_bytes(pid: int) -> int | None:
    """Peak resident set size (VmHWM), or None if the process is gone."""
    return _status_kib(pid, "VmHWM:")


def vm_rss_bytes(pid: int) -> int | None:
    """Resident set size now (VmRSS), or None if the process is gone."""
    return _status_kib(pid, "VmRSS:")


def _status_kib(pid: int, field: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class Sampler(threading.Thread):
    """Samples CPU seconds and VmHWM of one process every `interval` s, so the last values survive its exit."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.interval = interval
        self.cpu = 0.0
        self.hwm = 0
        self._halt = threading.Event()

    def sample(self) -> tuple[float, int]:
        """Takes a sample now; returns (cpu seconds, VmHWM bytes), the last known ones if the process is gone."""
        cpu = cpu_seconds(self.pid)
        hwm = vm_hwm_bytes(self.pid)
        if cpu is not None:
            self.cpu = cpu
        if hwm is not None:
            self.hwm = max(self.hwm, hwm)
        return self.cpu, self.hwm

    def run(self) -> None:
        while not self._halt.wait(self.interval):
            self.sample()

    def finish(self) -> None:
        self._halt.set()


def line_reader(proc: subprocess.Popen, sink) -> threading.Thread:
    """Feeds every stdout line of `proc` (stripped) to `sink(line)`, then `sink(None)` at EOF."""

    def pump() -> None:
        try:
            for line in proc.stdout:
                sink(line.rstrip("\n"))
        except (ValueError, OSError):
            pass  # stdout closed by stop()
        sink(None)

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    return t


# The busy-machine latency phase's competing load: one process per core, each pinned to its core, spinning in a tight
# loop at the default priority (nice 0), exactly like any other tenant of a shared machine that wants a whole core.
HOG_CODE = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True:\n    pass\n"


def start_hogs(reg: Registry, n: int, log_dir: Path) -> list[subprocess.Popen]:
    """Starts `n` busy loops (the fixed, documented CPU hog), the i-th pinned to core i mod cpu_count."""
    cores = sorted(os.sched_getaffinity(0))
    hogs = []
    for i in range(n):
        core = cores[i % len(cores)]
        hogs.append(reg.spawn(f"hog-{i}", [sys.executable, "-c", HOG_CODE, str(core)], log_dir / f"hog-{i}.log"))
    return hogs


def stop_hogs(reg: Registry, hogs: list[subprocess.Popen]) -> None:
    for h in hogs:
        reg.stop(h, timeout=5, sig=signal.SIGKILL)

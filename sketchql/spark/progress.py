"""A one-line progress indicator for Spark jobs, fed by the StatusTracker.

Spark's own console progress bar is turned off by :func:`sketchql.spark.config.spark_session`
(it interleaves with our output); this prints ``[label] stage 3: 5/8 tasks (2 running) 1.2s``
on one refreshed line of stderr while a block runs::

    with SparkProgress(spark, "build"):
        result = df.mapInArrow(...).collect()
"""
from __future__ import annotations

import sys
import threading
import time


class SparkProgress:
    """Context manager: a daemon thread polls ``sparkContext.statusTracker()``."""

    def __init__(self, spark, label: str = "spark", stream=None, interval: float = 0.5, enabled: bool = True):
        self.sc = spark.sparkContext
        self.label = label
        self.stream = stream or sys.stderr
        self.interval = interval
        self.enabled = enabled
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._width = 0

    def _line(self) -> str | None:
        tracker = self.sc.statusTracker()
        parts = []
        for sid in sorted(tracker.getActiveStageIds()):
            info = tracker.getStageInfo(sid)
            if info is None:
                continue
            parts.append(f"stage {sid}: {info.numCompletedTasks}/{info.numTasks} tasks"
                         f" ({info.numActiveTasks} running)")
        if not parts:
            return None
        return f"[{self.label}] " + ", ".join(parts) + f" {time.monotonic() - self._t0:.1f}s"

    def _write(self, text: str) -> None:
        pad = max(0, self._width - len(text))
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()
        self._width = len(text)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                line = self._line()
            except Exception:  # the JVM may be shutting down; progress is best effort
                return
            if line:
                self._write(line)

    def __enter__(self):
        self._t0 = time.monotonic()
        if self.enabled:
            self._thread = threading.Thread(target=self._run, name="sketchql-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * self.interval + 1)
            self._write(f"[{self.label}] done in {time.monotonic() - self._t0:.1f}s")
            self.stream.write("\n")
            self.stream.flush()
        return False

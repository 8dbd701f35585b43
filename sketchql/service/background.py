"""One daemon thread that runs an object's ``_run`` loop until ``stop()`` (demo feeder, dashboard sampler).

A subclass calls :meth:`BackgroundLoop._init_loop` in its ``__init__``, names its thread with
``THREAD_NAME`` and implements ``_run``, which returns when ``self._stop`` is set.

>>> import threading
>>> class Ticker(BackgroundLoop):
...     THREAD_NAME = "ticker"
...     def __init__(self):
...         self._init_loop(); self.n = 0
...     def _run(self):
...         while not self._stop.wait(0.001):
...             self.n += 1
>>> t = Ticker(); t.start(); t.start()      # a second start keeps the running thread
>>> t.stop(); t._thread is None
True
"""
from __future__ import annotations

import threading


class BackgroundLoop:
    THREAD_NAME = "sketchql-background"

    def _init_loop(self) -> None:
        self._stop = threading.Event()
        self._thread = None

    def _run(self) -> None:  # pragma: no cover - every subclass has its own loop
        raise NotImplementedError

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self.THREAD_NAME, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

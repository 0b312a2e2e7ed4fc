"""Named periodic and one-shot background tasks on trio, like Kafka's KafkaScheduler.

The broker runs its housekeeping through one `Scheduler`: retention every
`log.retention.check.interval.ms`, the delayed unlinking of `.deleted` files,
`flush.ms` flushing, checkpoint writing and later the log cleaner. Every task is a
child of the nursery the scheduler is given (the broker's), so nothing is
fire-and-forget and the broker's shutdown cancels them all.

Time is trio's clock (`trio.current_time`, `trio.sleep_until`), which is the
injectable clock: tests run under `trio.testing.MockClock` and the schedule
advances without sleeping.

Semantics:
- `schedule(name, fn, delay_s, period_s)`: first run `delay_s` after the call, then
  every `period_s` at a fixed rate measured from the planned start of each run; a
  run that overruns its period is followed by the next one at once, and missed
  runs are not caught up in a burst. Runs of one task never overlap.
- `schedule_once(name, fn, delay_s)`: one run after `delay_s`.
- `fn` is a plain or async callable. Work that blocks (file I/O) belongs in
  `trio.to_thread` inside `fn`; cancelling waits for such a thread to return, so
  shutdown never leaves a half-applied storage operation behind.
- A run that raises is logged with the task's name and counted; a periodic task
  keeps its schedule.
- Periodic task names are unique; one-shot names may repeat (like Kafka's
  `delete-file` tasks).
- `shutdown()` cancels every task; `aclose()` also waits until each has unwound
  (threads included): call it before closing what the tasks use.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

from broker.logging import get_logger

TaskFn = Callable[[], Awaitable[object] | object]

logger = get_logger(component="scheduler")


@dataclass(frozen=True, slots=True)
class TaskStatistics:
    """A snapshot of one task's counters, for metrics and tests."""

    name: str
    period_s: float | None
    runs: int
    failures: int
    last_duration_s: float | None
    last_started_s: float | None  # on trio's clock
    done: bool


class ScheduledTask:
    """A handle on one scheduled task: its counters and `cancel()`.

    Not thread-safe: use it from the trio thread that owns the scheduler.
    """

    def __init__(self, name: str, fn: TaskFn, delay_s: float, period_s: float | None) -> None:
        self.name = name
        self.fn = fn
        self.delay_s = delay_s
        self.period_s = period_s
        self.runs = 0
        self.failures = 0
        self.last_duration_s: float | None = None
        self.last_started_s: float | None = None
        self.done = False
        self.cancel_scope = trio.CancelScope()
        self.finished = trio.Event()
        self._ran = trio.Event()

    def cancel(self) -> None:
        """Stop the task; a run in progress is cancelled at its next checkpoint."""
        self.cancel_scope.cancel()

    async def wait_runs(self, count: int) -> None:
        """Wait until `count` runs have finished in total (or the task is done)."""
        while self.runs < count and not self.done:
            await self._ran.wait()

    def _run_finished(self) -> None:
        self.runs += 1
        self._ran.set()
        self._ran = trio.Event()

    def statistics(self) -> TaskStatistics:
        return TaskStatistics(
            name=self.name,
            period_s=self.period_s,
            runs=self.runs,
            failures=self.failures,
            last_duration_s=self.last_duration_s,
            last_started_s=self.last_started_s,
            done=self.done,
        )


class Scheduler:
    """Runs named tasks in a caller-owned nursery on trio's (injectable) clock."""

    def __init__(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        self._tasks: list[ScheduledTask] = []
        self._shut_down = False

    def schedule(self, name: str, fn: TaskFn, delay_s: float, period_s: float) -> ScheduledTask:
        """Run `fn` after `delay_s` seconds, then every `period_s` seconds."""
        if not (math.isfinite(period_s) and period_s > 0):
            raise ValueError(f"task {name!r}: period_s must be > 0, got {period_s!r}")
        if any(t.name == name and t.period_s is not None for t in self._live_tasks()):
            raise ValueError(f"a periodic task named {name!r} is already scheduled")
        return self._start(ScheduledTask(name, fn, self._check_delay(name, delay_s), period_s))

    def schedule_once(self, name: str, fn: TaskFn, delay_s: float) -> ScheduledTask:
        """Run `fn` once, `delay_s` seconds from now."""
        return self._start(ScheduledTask(name, fn, self._check_delay(name, delay_s), None))

    def cancel(self, name: str) -> int:
        """Cancel every live task with this name; returns how many there were."""
        tasks = [t for t in self._live_tasks() if t.name == name]
        for task in tasks:
            task.cancel()
        return len(tasks)

    def shutdown(self) -> None:
        """Cancel every task and refuse new ones (the nursery waits for them to unwind)."""
        self._shut_down = True
        for task in self._tasks:
            task.cancel()

    async def aclose(self) -> None:
        """Cancel every task and wait until each has unwound, including a run that is
        finishing in a worker thread: call it before closing what the tasks use."""
        self.shutdown()
        for task in self._tasks:
            await task.finished.wait()

    def statistics(self) -> list[TaskStatistics]:
        """Live tasks' counters, in the order they were scheduled."""
        return [t.statistics() for t in self._live_tasks()]

    def _live_tasks(self) -> list[ScheduledTask]:
        return [t for t in self._tasks if not t.done]

    @staticmethod
    def _check_delay(name: str, delay_s: float) -> float:
        if not (math.isfinite(delay_s) and delay_s >= 0):
            raise ValueError(f"task {name!r}: delay_s must be >= 0, got {delay_s!r}")
        return delay_s

    def _start(self, task: ScheduledTask) -> ScheduledTask:
        if self._shut_down:
            raise RuntimeError(f"scheduler is shut down; cannot schedule {task.name!r}")
        self._tasks = [*self._live_tasks(), task]
        self._nursery.start_soon(self._run_task, task, trio.current_time() + task.delay_s)
        return task

    async def _run_task(self, task: ScheduledTask, first_deadline: float) -> None:
        deadline = first_deadline
        try:
            with task.cancel_scope:
                while True:
                    await trio.sleep_until(deadline)
                    await self._run_once(task)
                    if task.period_s is None:
                        return
                    deadline = max(deadline + task.period_s, trio.current_time())
        finally:
            task.done = True
            task.finished.set()
            task._ran.set()

    @staticmethod
    async def _run_once(task: ScheduledTask) -> None:
        started = task.last_started_s = trio.current_time()
        try:
            result = task.fn()
            if inspect.isawaitable(result):
                await result
        except Exception:
            task.failures += 1
            logger.exception("scheduler_task_failed", task=task.name, run=task.runs + 1)
        finally:
            task.last_duration_s = trio.current_time() - started
            task._run_finished()

"""Worker processes for a multi-file run that stop the moment they are told to, and survive a worker's death.

Each worker has a pipe of its own, and takes a chunk of items at a time; it answers item by item,
so the parent always knows which item a worker was on. That gives what a run over a tree needs:

- Ctrl-C, SIGTERM, or anything else that ends the run early kills every worker at once (SIGKILL:
  workers only read and compute, never write, so nothing is lost), however long the chunk each was
  on, and waits for them: none outlives the run.
- A worker that dies (killed, or a crash in native code) costs one item: the parent reports it with
  the cause, gives the rest of that worker's chunk to a new worker, and carries on.
- Workers ignore Ctrl-C, which a terminal sends to the whole process group: the parent alone
  decides, and kills them; a traceback from each worker would bury its message. SIGTERM or SIGHUP
  end a worker at once, as they would any process. Should the parent be killed, each worker finds
  its pipe closed once it has answered its chunk, and exits.

A pool from the standard library gives one or the other, not both: one waits for the chunks under
way before it stops, another loses a dead worker's task and waits for it forever.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any, Generic, TypeVar

from dp2ddp.interrupts import STOP_SIGNALS

T = TypeVar("T")
W = TypeVar("W")


class WorkerCrashed(Exception):
    """The worker process working on an item died before it answered: ``why`` says how it ended."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


@dataclass
class _Worker(Generic[W]):
    process: BaseProcess
    connection: Connection
    # Items sent and not answered yet, (index, item), in the order the worker takes them.
    assigned: deque[tuple[int, W]] = field(default_factory=deque)


def pooled(
    work: Callable[[W], T], items: Sequence[W], processes: int, chunk: int
) -> Iterator[tuple[W, T | WorkerCrashed]]:
    """``(item, work(item))`` for each item, in order, computed by ``processes`` workers ``chunk`` items at a time.

    The outcome is a ``WorkerCrashed`` where the worker died on that item. An exception ``work``
    raises is raised here. The workers are killed when this iterator ends, is closed or is interrupted.
    """
    context = multiprocessing.get_context()
    waiting: deque[tuple[int, W]] = deque(enumerate(items))
    answered: dict[int, T | WorkerCrashed] = {}
    workers: list[_Worker[W]] = []
    following = 0
    try:
        while following < len(items):
            while waiting and len(workers) < processes:
                _start(context, work, workers)
            for worker in workers:
                # A chunk only to a worker that has none: it is reading, so a large chunk cannot block
                # the parent while the worker waits for the parent to read its answers.
                if waiting and not worker.assigned:
                    worker.assigned.extend(waiting.popleft() for _ in range(min(chunk, len(waiting))))
                    _send(worker)
            ready = set(wait([w.connection for w in workers] + [w.process.sentinel for w in workers]))
            for worker in list(workers):
                ended = worker.process.sentinel in ready
                if worker.connection in ready or ended:
                    # An ended worker's answers are read first: only the item it was on is lost.
                    ended = not _receive(worker, answered) or ended
                if ended:
                    workers.remove(worker)
                    _bury(worker, answered, waiting)
            while following in answered:
                yield items[following], answered.pop(following)
                following += 1
    finally:
        _stop(workers)


def _start(context: Any, work: Callable[[W], T], workers: list[_Worker[W]]) -> None:
    mine, theirs = context.Pipe()
    process = context.Process(target=_serve, args=(work, theirs), daemon=True, name="dp2ddp worker")
    # Blocked until the worker is on the list the parent kills, and the worker has its own handlers:
    # a signal that came meanwhile reaches the parent once unblocked, and never a worker's copy of
    # the parent's handler.
    blocked = _mask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        process.start()
        workers.append(_Worker(process, mine))
    finally:
        theirs.close()
        _mask(signal.SIG_SETMASK, blocked)


def _mask(how: int, signals: Iterable[int]) -> set[int]:
    # Windows has no signal masks, and its workers start with their own handlers, not a copy of the parent's.
    return signal.pthread_sigmask(how, signals) if hasattr(signal, "pthread_sigmask") else set()


def _send(worker: _Worker[W]) -> None:
    try:
        worker.connection.send(list(worker.assigned))
    except OSError:
        pass  # it has died: its sentinel says so at the next wait, and its chunk goes to another worker


def _receive(worker: _Worker[W], answered: dict[int, Any]) -> bool:
    """Take every answer the worker has sent so far; ``False`` once its pipe is closed (it has ended).

    An exception ``work`` raised is raised here.
    """
    while True:
        try:
            if not worker.connection.poll():
                return True
            index, ok, outcome = worker.connection.recv()
        except (EOFError, OSError):
            return False
        worker.assigned.popleft()
        if not ok:
            raise outcome
        answered[index] = outcome


def _bury(worker: _Worker[W], answered: dict[int, Any], waiting: deque[tuple[int, W]]) -> None:
    """A worker has ended: the item it was on is answered with why, the rest of its chunk goes back to the queue."""
    worker.connection.close()
    worker.process.join()
    if not worker.assigned:
        return
    index, _ = worker.assigned.popleft()
    answered[index] = WorkerCrashed(_ended(worker.process.exitcode))
    waiting.extendleft(reversed(worker.assigned))


def _ended(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"the worker process was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"the worker process was killed by signal {-exitcode}"
    return f"the worker process exited with status {exitcode}"


def _stop(workers: list[_Worker[W]]) -> None:
    # Every worker is sent its signal before any is waited for, so that an interruption here leaves none running.
    for worker in workers:
        if worker.process.exitcode is None:
            worker.process.kill()
    for worker in workers:
        worker.process.join()
        worker.connection.close()


def _serve(work: Callable[[W], T], connection: Connection) -> None:
    """A worker's life: take a chunk, answer item by item, until the parent has no more or is gone."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN if signum == signal.SIGINT else signal.SIG_DFL)
    _mask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    while True:
        try:
            chunk = connection.recv()
        except (EOFError, OSError):
            return
        for index, item in chunk:
            try:
                answer = (index, True, work(item))
            except Exception as error:
                answer = (index, False, error)
            try:
                connection.send(answer)
            except (EOFError, OSError):
                return
            except Exception as error:  # an outcome that does not pickle
                connection.send((index, False, RuntimeError(f"{type(error).__name__}: {error}")))

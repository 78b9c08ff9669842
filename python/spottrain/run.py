"""Run: a standard training loop with resume, periodic and notice-time saves,
and reports, without a framework to adopt (docs/python-client.md)."""
import logging
from typing import Any, Dict, Iterator, Optional

import torch

from .session import Session, default_session

log = logging.getLogger("spottrain")


def _distributed() -> bool:
    dist = torch.distributed
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def _collective_device():
    if torch.distributed.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class Run:
    """A loop of `total_steps` steps that resumes from the newest checkpoint.

        with spottrain.Run(total_steps=1000, save_every=100,
                           state={"model": model, "optimizer": opt}) as run:
            for step in run.steps():
                ...one training step...
                run.report(loss=loss.item(), samples=len(x))

    state: what a checkpoint holds, by name. Objects with state_dict() and
        load_state_dict() (modules, optimizers, schedulers, GradScaler) are
        saved through them and restored in place; any other value (tensors,
        numbers, lists) is saved as is and put back into run.state[name].
        Add entries to run.state before the loop starts.
    save_every: save after every this many steps (0: only at a notice and at
        the end).
    exit_on_stop: leaving the `with` block after a notice raises SystemExit(0),
        so nothing after the loop (evaluation, export) runs on an instance
        being reclaimed; False: check run.stopped instead.
    sync_stop: with torch.distributed initialized, the ranks agree on stopping
        (one all-reduce of a flag before each step) so they all leave the
        loop at the same step.

    steps() yields the step about to run (0-based, from start_step); a
    checkpoint's step counts completed steps, so it is the next one to run.
    """

    def __init__(self, total_steps: int, save_every: int = 0,
                 state: Optional[Dict[str, Any]] = None, session: Optional[Session] = None,
                 exit_on_stop: bool = True, sync_stop: bool = True, map_location="cpu"):
        if isinstance(total_steps, bool) or not isinstance(total_steps, int) or total_steps < 0:
            raise ValueError(f"total_steps: must be an integer >= 0, got {total_steps!r}")
        if isinstance(save_every, bool) or not isinstance(save_every, int) or save_every < 0:
            raise ValueError(f"save_every: must be an integer >= 0, got {save_every!r}")
        self.total_steps = total_steps
        self.save_every = save_every
        self.state: Dict[str, Any] = dict(state or {})
        self.session = session if session is not None else default_session()
        self.exit_on_stop = exit_on_stop
        self.sync_stop = sync_stop
        self.map_location = map_location
        self.step = 0  # steps completed
        self.stopped = False  # left the loop because of a notice
        self.finished = False  # ran all total_steps
        self._start_step = None
        self._saved_step = None
        self._running = None  # the step being run inside the loop
        self._last = {}  # the last report's loss, epoch, metrics (for the final one)

    # --- resume ---
    @property
    def start_step(self) -> int:
        """The step training starts at: the loaded checkpoint's, or 0. Reading
        it loads the checkpoint (as steps() does) if that did not happen yet."""
        return self.resume()

    def resume(self) -> int:
        """Loads the newest valid checkpoint into run.state (once) and returns
        start_step. With torch.distributed, rank 0 picks the version and every
        rank loads that one."""
        if self._start_step is not None:
            return self._start_step
        s = self.session
        loaded = None
        if _distributed():
            chosen = -1
            if s.rank == 0:
                loaded = s.load(self.map_location)
                chosen = -1 if loaded is None else loaded[1]
            t = torch.tensor([chosen], dtype=torch.int64, device=_collective_device())
            torch.distributed.broadcast(t, src=0)
            chosen = int(t.item())
            if s.rank != 0 and chosen >= 0:
                loaded = s.load(self.map_location, step=chosen)
                if loaded is None:
                    raise RuntimeError(f"rank {s.rank}: checkpoint step {chosen} in "
                                       f"{s.checkpoint_dir}, which rank 0 loaded, is not valid "
                                       "here (see the warning above)")
        else:
            loaded = s.load(self.map_location)
        self._start_step = 0
        if loaded is not None:
            self._apply(*loaded)
            self._start_step = self._saved_step = loaded[1]
            log.info("spottrain: resumed from step %d of %s", loaded[1], s.checkpoint_dir)
        self.step = self._start_step
        return self._start_step

    def _apply(self, saved: Dict[str, Any], step: int) -> None:
        for name, obj in self.state.items():
            if name not in saved:
                log.warning("spottrain: checkpoint step %d has no %r: left as it is", step, name)
            elif hasattr(obj, "load_state_dict"):
                obj.load_state_dict(saved[name])
            else:
                self.state[name] = saved[name]
        for name in saved.keys() - self.state.keys():
            log.warning("spottrain: checkpoint step %d holds %r, which run.state does not name",
                        step, name)

    # --- the loop ---
    def steps(self) -> Iterator[int]:
        """Yields start_step .. total_steps-1; saves every save_every steps,
        at the end (then reports done) and when a notice came (then stops)."""
        step = self.resume()
        while step < self.total_steps:
            if self._stop_agreed():
                self._stop(step)
                return
            self._running = step
            yield step
            self._running = None
            step += 1
            self.step = step
            if self.save_every and step % self.save_every == 0 and step < self.total_steps:
                self.save()
        if self._saved_step != self.step:
            self.save()
        self.finished = True
        self.session.report(self.step, total_steps=self.total_steps, done=True, **self._last)

    def _stop_agreed(self) -> bool:
        stop = self.session.should_stop()
        if self.sync_stop and _distributed():
            t = torch.tensor([1 if stop else 0], dtype=torch.int32, device=_collective_device())
            torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
            stop = bool(t.item())
        return stop

    def _stop(self, step: int) -> None:
        if self._saved_step != step:
            self.save()
        self.stopped = True
        log.warning("spottrain: stopped for a notice after step %d (checkpoint saved)", step)
        self.session.report(step, total_steps=self.total_steps, **self._last)

    def save(self) -> Optional[str]:
        """Saves run.state as version run.step (rank 0 writes); the path or None."""
        self._saved_step = self.step
        if self.session.rank != 0:
            return None
        snapshot = {name: obj.state_dict() if hasattr(obj, "state_dict") else obj
                    for name, obj in self.state.items()}
        return self.session.save(snapshot, self.step)

    def report(self, loss=None, samples=None, metrics=None, epoch=None,
               step: Optional[int] = None) -> None:
        """Reports progress (see Session.report). step defaults to the steps
        completed once the running one ends (run.step outside the loop)."""
        if step is None:
            step = self.step if self._running is None else self._running + 1
        self._last = {k: v for k, v in (("loss", loss), ("metrics", metrics), ("epoch", epoch))
                      if v is not None}
        self.session.report(step, loss=loss, samples=samples, metrics=metrics, epoch=epoch,
                            total_steps=self.total_steps)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None and self.stopped and self.exit_on_stop:
            self.session.flush()
            raise SystemExit(0)
        return False

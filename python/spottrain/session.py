"""Session: what a training program needs from SpotTrain, in one object."""
import logging
import os
from typing import Any, Callable, Optional, Tuple

import torch

from .checkpoint import CheckpointStore
from .checkpoint import restore_rng as _restore_rng_states
from .env import ConfigError, JobEnv, read_env, signal_number
from .notice import NoticeWatcher
from .reporter import Reporter, make_body

log = logging.getLogger("spottrain")

DEFAULT_CHECKPOINT_DIR = "checkpoints"


def _dist_rank_world() -> Optional[Tuple[int, int]]:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


class Session:
    """Reads the job's variables, watches for a termination notice, saves and
    loads checkpoints, reports progress.

    checkpoint_dir: used when SPOT_CHECKPOINT_DIR is not set (SpotTrain's
        directory is the durable one and wins); default ./checkpoints.
    notice_signal: the signal to handle, by name; default SPOT_NOTICE_SIGNAL
        or SIGTERM.
    on_notice: called once with notice() (a dict, or None when the notice came
        as a signal without a file) from the first should_stop() (or save(),
        or Run's step loop) that sees the notice; not from the signal handler.
    keep: checkpoint versions kept (None: all).
    report_all_ranks: every rank reports, not only rank 0.
    environ: the variables (default os.environ).
    install_handler: install the signal handler (main thread only).
    """

    def __init__(self, checkpoint_dir: Optional[str] = None, notice_signal: Optional[str] = None,
                 on_notice: Optional[Callable[[Optional[dict]], None]] = None,
                 keep: Optional[int] = 3, report_all_ranks: bool = False,
                 report_timeout_s: float = 2.0, environ=None, install_handler: bool = True):
        self.env: JobEnv = read_env(environ)
        if self.env.checkpoint_dir is not None:
            if checkpoint_dir is not None and os.path.abspath(checkpoint_dir) != os.path.abspath(
                    self.env.checkpoint_dir):
                log.info("spottrain: checkpoints go to SPOT_CHECKPOINT_DIR %s, not %s",
                         self.env.checkpoint_dir, checkpoint_dir)
            directory = self.env.checkpoint_dir
        else:
            directory = checkpoint_dir or DEFAULT_CHECKPOINT_DIR
        self._directory = os.path.abspath(directory)
        self._keep = keep
        self._store = CheckpointStore(self._directory, keep)
        signum = signal_number(notice_signal or self.env.notice_signal)
        self._watcher = NoticeWatcher(self.env.notice_file, signum, on_notice)
        if install_handler:
            self._watcher.install()
        self._report_all_ranks = report_all_ranks
        self._report_timeout_s = report_timeout_s
        self._reporter = None
        if self.env.controller_url is not None:
            if self.env.job is None:
                raise ConfigError("environment variable SPOT_JOB: must be set with "
                                  "SPOT_CONTROLLER_URL (the job to report to)")
            self._reporter = Reporter(self.env.controller_url, self.env.job, self.env.token_file,
                                      report_timeout_s)

    # --- who and where ---
    @property
    def rank(self) -> int:
        """torch.distributed's rank once initialized, else RANK (0 by hand)."""
        rw = _dist_rank_world()
        return rw[0] if rw else self.env.rank

    @property
    def world_size(self) -> int:
        rw = _dist_rank_world()
        return rw[1] if rw else self.env.world_size

    @property
    def checkpoint_dir(self) -> str:
        return self._directory

    def _store_for(self, all_ranks: bool) -> CheckpointStore:
        if not all_ranks:
            return self._store
        return CheckpointStore(os.path.join(self._directory, f"rank-{self.rank:05d}"), self._keep)

    # --- notices ---
    def should_stop(self) -> bool:
        """True once the notice signal came or the notice file exists."""
        return self._watcher.stop_requested()

    def notice(self) -> Optional[dict]:
        """The notice file's object, or None."""
        return self._watcher.notice()

    def deadline_s(self) -> Optional[float]:
        """Seconds left before the instance is reclaimed, or None."""
        return self._watcher.deadline_s()

    # --- checkpoints ---
    def save(self, state: Any, step: int, all_ranks: bool = False) -> Optional[str]:
        """Saves `state` (anything torch.save takes) with the RNG states as
        version `step` on rank 0 and returns the payload's path; other ranks
        return None without writing. all_ranks=True: every rank saves into
        its own subdirectory rank-NNNNN (state that differs per rank)."""
        self._watcher.stop_requested()  # a pending on_notice runs now, not mid-write
        if not all_ranks and self.rank != 0:
            return None
        return self._store_for(all_ranks).save(state, step)

    def load(self, map_location="cpu", restore_rng: bool = True, step: Optional[int] = None,
             all_ranks: bool = False) -> Optional[Tuple[Any, int]]:
        """(state, step) of the newest valid version (or of version `step`),
        None when there is none. Every rank reads the same directory (or its
        own with all_ranks=True). Restores the RNG states unless told not to."""
        loaded = self._store_for(all_ranks).load(map_location, step)
        if loaded is None:
            return None
        threads = loaded.info.get("threads")
        if threads is not None and threads != torch.get_num_threads():
            log.warning("spottrain: checkpoint step %d was saved with %d intra-op threads, this "
                        "process has %d: results may differ in the last bits", loaded.step,
                        threads, torch.get_num_threads())
        if restore_rng and loaded.rng:
            _restore_rng_states(loaded.rng)
        return loaded.state, loaded.step

    def checkpoint_steps(self):
        """Committed versions' steps, newest first (not verified)."""
        return self._store.steps()

    # --- reports ---
    def report(self, step: int, loss=None, samples=None, metrics=None, epoch=None,
               total_steps=None, done: bool = False) -> None:
        """Queues a progress report (rank 0 only unless report_all_ranks);
        never raises, never waits. A report with done=True waits up to the
        timeout for delivery (the final report)."""
        if self._reporter is None or (self.rank != 0 and not self._report_all_ranks):
            return
        try:
            body = make_body(self.env.instance, self.rank, step, loss, samples, metrics, epoch,
                             total_steps, done)
        except (TypeError, ValueError) as e:
            log.warning("spottrain: report of step %r not sent: %s", step, e)
            return
        self._reporter.submit(body)
        if done:
            self._reporter.flush(self._reporter_timeout())

    def _reporter_timeout(self) -> float:
        return 2 * self._report_timeout_s + 1  # the one in flight, then the merged one

    def flush(self, timeout_s: Optional[float] = None) -> bool:
        """Waits for queued reports; True when all were accepted (or there is
        no controller)."""
        if self._reporter is None:
            return True
        return self._reporter.flush(self._reporter_timeout() if timeout_s is None else timeout_s)

    @property
    def reports_sent(self) -> int:
        return 0 if self._reporter is None else self._reporter.sent

    def close(self) -> None:
        """Delivers queued reports (bounded wait) and removes the handler."""
        if self._reporter is not None:
            self._reporter.close(self._reporter_timeout())
        self._watcher.uninstall()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False



_default: Optional[Session] = None


def default_session() -> Session:
    """The session of spottrain.init(), made with the defaults when init()
    was not called."""
    global _default
    if _default is None:
        _default = Session()
    return _default


def set_default_session(session: Optional[Session]) -> None:
    global _default
    if _default is not None and _default is not session:
        _default.close()
    _default = session

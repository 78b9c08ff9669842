"""spottrain: the client library of SpotTrain's command workloads.

A program that `spot run` starts (through `spot agent`) finds its rank, its
checkpoint directory and termination notices here, saves crash-safe
checkpoints with the RNG states for a bit-exact resume, and reports its
progress to the controller. Without SpotTrain it still works: rank 0 of 1,
checkpoints in ./checkpoints (or the directory given), no reports.
See docs/python-client.md.
"""
from typing import Any, Callable, Optional, Tuple

from .checkpoint import FORMAT, CheckpointStore, capture_rng, restore_rng
from .env import NOTICE_SIGNALS, ConfigError, JobEnv, read_env
from .run import Run
from .session import Session, default_session, set_default_session

__version__ = "0.1.0"

__all__ = [
    "FORMAT", "NOTICE_SIGNALS", "CheckpointStore", "ConfigError", "JobEnv", "Run", "Session",
    "capture_rng", "checkpoint_dir", "deadline_s", "init", "load", "notice", "rank", "read_env",
    "report", "restore_rng", "save", "session", "should_stop", "world_size"
]


def init(checkpoint_dir: Optional[str] = None, notice_signal: Optional[str] = None,
         on_notice: Optional[Callable[[Optional[dict]], None]] = None, **options) -> Session:
    """Makes the process's session (replacing an earlier one) and returns it;
    the module-level functions below use it. See Session for the arguments."""
    s = Session(checkpoint_dir=checkpoint_dir, notice_signal=notice_signal, on_notice=on_notice,
                **options)
    set_default_session(s)
    return s


def session() -> Session:
    """The session of init(), made with the defaults on first use."""
    return default_session()


def should_stop() -> bool:
    return default_session().should_stop()


def notice() -> Optional[dict]:
    return default_session().notice()


def deadline_s() -> Optional[float]:
    return default_session().deadline_s()


def save(state: Any, step: int, all_ranks: bool = False) -> Optional[str]:
    return default_session().save(state, step, all_ranks=all_ranks)


def load(map_location="cpu", restore_rng: bool = True, **options) -> Optional[Tuple[Any, int]]:
    return default_session().load(map_location, restore_rng, **options)


def report(step: int, loss=None, samples=None, metrics=None, epoch=None, total_steps=None,
           done: bool = False) -> None:
    default_session().report(step, loss, samples, metrics, epoch, total_steps, done)


def checkpoint_dir() -> str:
    return default_session().checkpoint_dir


def rank() -> int:
    return default_session().rank


def world_size() -> int:
    return default_session().world_size

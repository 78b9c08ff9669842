"""What SpotTrain tells a program through its environment (docs/python-client.md).

torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK,
MASTER_ADDR, MASTER_PORT) and SpotTrain's own (SPOT_*). Every variable may be
absent: a program started by hand is rank 0 of 1 with no controller.
"""
import dataclasses
import os
import signal
from typing import Mapping, Optional

# The signals the agent may send on a notice (the job's
# job_recovery.notice_signal): the ones a program can catch to save.
NOTICE_SIGNALS = ("SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2", "SIGHUP", "SIGQUIT")


class ConfigError(ValueError):
    """A variable or argument with a value the client cannot use; the message
    names it and says why."""


@dataclasses.dataclass(frozen=True)
class JobEnv:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    node_rank: int = 0
    master_addr: Optional[str] = None
    master_port: Optional[int] = None
    job: Optional[str] = None  # SPOT_JOB
    instance: Optional[str] = None  # SPOT_INSTANCE
    checkpoint_dir: Optional[str] = None  # SPOT_CHECKPOINT_DIR
    notice_file: Optional[str] = None  # SPOT_NOTICE_FILE
    controller_url: Optional[str] = None  # SPOT_CONTROLLER_URL
    token_file: Optional[str] = None  # SPOT_TOKEN_FILE
    notice_signal: str = "SIGTERM"  # SPOT_NOTICE_SIGNAL

    @property
    def under_spottrain(self) -> bool:
        """True when started by SpotTrain's agent (SPOT_JOB is set)."""
        return self.job is not None


def _int(environ, name, default, minimum):
    text = environ.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"environment variable {name}: expected an integer, got {text!r}")
    if value < minimum:
        raise ConfigError(f"environment variable {name}: must be >= {minimum}, got {value}")
    return value


def _str(environ, name):
    text = environ.get(name)
    return text if text else None


def signal_number(name: str) -> int:
    """The number of a notice signal given by name ("SIGTERM"); ConfigError
    for a name outside NOTICE_SIGNALS."""
    if name not in NOTICE_SIGNALS:
        raise ConfigError(
            f"notice signal {name!r}: must be one of {', '.join(NOTICE_SIGNALS)}")
    return int(getattr(signal, name))


def read_env(environ: Optional[Mapping[str, str]] = None) -> JobEnv:
    """Reads the variables from `environ` (default os.environ); ConfigError
    naming the variable for a malformed value."""
    environ = os.environ if environ is None else environ
    env = JobEnv(
        rank=_int(environ, "RANK", 0, 0),
        world_size=_int(environ, "WORLD_SIZE", 1, 1),
        local_rank=_int(environ, "LOCAL_RANK", 0, 0),
        local_world_size=_int(environ, "LOCAL_WORLD_SIZE", 1, 1),
        node_rank=_int(environ, "NODE_RANK", 0, 0),
        master_addr=_str(environ, "MASTER_ADDR"),
        master_port=_int(environ, "MASTER_PORT", None, 0),
        job=_str(environ, "SPOT_JOB"),
        instance=_str(environ, "SPOT_INSTANCE"),
        checkpoint_dir=_str(environ, "SPOT_CHECKPOINT_DIR"),
        notice_file=_str(environ, "SPOT_NOTICE_FILE"),
        controller_url=_str(environ, "SPOT_CONTROLLER_URL"),
        token_file=_str(environ, "SPOT_TOKEN_FILE"),
        notice_signal=_str(environ, "SPOT_NOTICE_SIGNAL") or "SIGTERM",
    )
    if env.rank >= env.world_size:
        raise ConfigError(
            f"environment variable RANK: {env.rank} is not below WORLD_SIZE {env.world_size}")
    signal_number(env.notice_signal)  # refuses an unknown name
    if env.controller_url is not None and not env.controller_url.startswith(
            ("http://", "https://")):
        raise ConfigError("environment variable SPOT_CONTROLLER_URL: expected an http:// URL, "
                          f"got {env.controller_url!r}")
    return env

"""Crash-safe checkpoint versions in one directory (docs/python-client.md).

A version of step N is two files: the payload `ckpt-<N:012d>.pt` (torch.save
of the state, the RNG states and the step) and its manifest
`ckpt-<N:012d>.json` (format, step, file, size, sha256, unix_s). Each is
written to a temporary file, flushed, fsynced and renamed, then the directory
is fsynced; the manifest goes last, so a version exists only once both are
durable (the manifest is the commit). Loading takes the newest version whose
manifest parses and whose payload has the recorded size and SHA-256 and
unpickles; anything else is skipped with a warning, never returned.

One writer per directory (rank 0, or each rank in its own subdirectory).
"""
import hashlib
import json
import logging
import os
import random
import re
import time
import uuid
from typing import Any, List, NamedTuple, Optional

import torch

try:
    import numpy
except ImportError:  # numpy is optional: its RNG is then neither saved nor restored
    numpy = None

log = logging.getLogger("spottrain")

FORMAT = "spottrain-ckpt-1"
_MANIFEST_RE = re.compile(r"^ckpt-(\d{12})\.json$")
_PAYLOAD_RE = re.compile(r"^ckpt-(\d{12})\.pt$")
_TEMP_PREFIX = ".ckpt-"
_HASH_CHUNK = 1 << 20


def payload_name(step: int) -> str:
    return f"ckpt-{step:012d}.pt"


def manifest_name(step: int) -> str:
    return f"ckpt-{step:012d}.json"


def capture_rng() -> dict:
    """The generator states of torch (CPU, and CUDA once initialized), numpy
    and random."""
    rng = {"torch": torch.get_rng_state(), "random": random.getstate()}
    if numpy is not None:
        rng["numpy"] = numpy.random.get_state()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    return rng


def restore_rng(rng: dict) -> None:
    """Puts back what capture_rng() took (a generator missing here is skipped
    with a warning)."""
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["random"])
    if "numpy" in rng:
        if numpy is None:
            log.warning("spottrain: the checkpoint holds numpy's RNG state but numpy is "
                        "not importable: not restored")
        else:
            numpy.random.set_state(rng["numpy"])
    if "cuda" in rng:
        if not torch.cuda.is_available():
            log.warning("spottrain: the checkpoint holds CUDA RNG states but CUDA is not "
                        "available: not restored")
        elif len(rng["cuda"]) != torch.cuda.device_count():
            log.warning("spottrain: the checkpoint holds %d CUDA RNG states, this machine has "
                        "%d devices: not restored", len(rng["cuda"]), torch.cuda.device_count())
        else:
            torch.cuda.set_rng_state_all(rng["cuda"])


class Loaded(NamedTuple):
    state: Any  # what was given to save()
    step: int
    rng: dict  # capture_rng() at the save
    info: dict  # torch version and intra-op threads at the save


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _HashingWriter:
    """A file-like object for torch.save that hashes and counts what it writes."""

    def __init__(self, f):
        self._f = f
        self.sha256 = hashlib.sha256()
        self.size = 0

    def write(self, data):
        self.sha256.update(data)
        self.size += len(data)
        return self._f.write(data)

    def flush(self):
        self._f.flush()


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class CheckpointStore:
    """The versions in `directory` (created when missing); keeps the newest
    `keep` after each save (None: all)."""

    def __init__(self, directory: str, keep: Optional[int] = 3):
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int)
                                 or keep < 1):
            raise ValueError(f"keep: must be an integer >= 1 or None, got {keep!r}")
        self.directory = os.path.abspath(directory)
        self.keep = keep

    def _path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def steps(self) -> List[int]:
        """Steps with a manifest (committed, not yet verified), newest first."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        found = (_MANIFEST_RE.match(n) for n in names)
        return sorted((int(m.group(1)) for m in found if m), reverse=True)

    def _write_atomic(self, name: str, write) -> None:
        """Runs write(file) on a temporary file, then fsync and rename to `name`."""
        tmp = self._path(f"{_TEMP_PREFIX}{name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        try:
            with open(tmp, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            os.rename(tmp, self._path(name))
        except BaseException:
            _unlink(tmp)
            raise
        _fsync_dir(self.directory)

    def save(self, state: Any, step: int, rng: Optional[dict] = None) -> str:
        """Writes and commits version `step`; returns the payload's path. A
        version of the same step is replaced; versions of later steps are
        removed (the training went back to `step`, so they are not its
        future), then all but the newest `keep`."""
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"step: must be an integer >= 0, got {step!r}")
        os.makedirs(self.directory, exist_ok=True)
        payload = {
            "format": FORMAT,
            "step": step,
            "state": state,
            "rng": capture_rng() if rng is None else rng,
            "info": {"torch": torch.__version__, "threads": torch.get_num_threads()},
        }
        writer = None

        def write_payload(f):
            nonlocal writer
            writer = _HashingWriter(f)
            torch.save(payload, writer)

        self._write_atomic(payload_name(step), write_payload)
        manifest = {
            "format": FORMAT,
            "step": step,
            "file": payload_name(step),
            "size": writer.size,
            "sha256": writer.sha256.hexdigest(),
            "unix_s": time.time(),
        }
        body = (json.dumps(manifest, indent=1) + "\n").encode()
        self._write_atomic(manifest_name(step), lambda f: f.write(body))
        self._prune(step)
        return self._path(payload_name(step))

    def _prune(self, saved: int) -> None:
        steps = self.steps()
        later = [s for s in steps if s > saved]
        if later:
            log.warning("spottrain: removing checkpoint versions %s of %s: they are later "
                        "than step %d, just saved", later, self.directory, saved)
        older = [s for s in steps if s < saved]
        drop = later + (older[self.keep - 1:] if self.keep is not None else [])
        for s in drop:  # the manifest first: the version stops existing at once
            _unlink(self._path(manifest_name(s)))
            _unlink(self._path(payload_name(s)))
        kept = set(steps) - set(drop)
        for name in os.listdir(self.directory):
            m = _PAYLOAD_RE.match(name)
            orphan = m is not None and int(m.group(1)) not in kept
            if orphan or name.startswith(_TEMP_PREFIX):  # left by a writer that died
                _unlink(self._path(name))
        _fsync_dir(self.directory)

    def load(self, map_location="cpu", step: Optional[int] = None) -> Optional[Loaded]:
        """The newest valid version (or exactly version `step`), None when
        there is none; invalid versions are skipped with a warning."""
        candidates = self.steps() if step is None else [step]
        for s in candidates:
            loaded = self._load_version(s, map_location)
            if loaded is not None:
                return loaded
        return None

    def _skip(self, name: str, reason: str) -> None:
        log.warning("spottrain: skipping checkpoint %s: %s", self._path(name), reason)

    def _read_manifest(self, step: int) -> Optional[dict]:
        name = manifest_name(step)
        try:
            with open(self._path(name), "rb") as f:
                m = json.loads(f.read())
        except FileNotFoundError:
            self._skip(name, "no such file")
            return None
        except (OSError, ValueError) as e:
            self._skip(name, f"manifest unreadable: {e}")
            return None
        expected = {"format": FORMAT, "step": step, "file": payload_name(step)}
        if not isinstance(m, dict):
            self._skip(name, "manifest is not a JSON object")
            return None
        for key, want in expected.items():
            if m.get(key) != want:
                self._skip(name, f"manifest field {key}: expected {want!r}, got {m.get(key)!r}")
                return None
        size, digest = m.get("size"), m.get("sha256")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            self._skip(name, f"manifest field size: expected a byte count, got {size!r}")
            return None
        if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
            self._skip(name, f"manifest field sha256: expected 64 hex digits, got {digest!r}")
            return None
        return m

    def _load_version(self, step: int, map_location) -> Optional[Loaded]:
        m = self._read_manifest(step)
        if m is None:
            return None
        name = m["file"]
        try:
            f = open(self._path(name), "rb")
        except OSError as e:
            self._skip(name, f"payload unreadable: {e.strerror or e}")
            return None
        with f:  # one descriptor for the check and the load: the same bytes
            size = os.fstat(f.fileno()).st_size
            if size != m["size"]:
                self._skip(name, f"payload is {size} bytes, the manifest says {m['size']}")
                return None
            h = hashlib.sha256()
            while chunk := f.read(_HASH_CHUNK):
                h.update(chunk)
            if h.hexdigest() != m["sha256"]:
                self._skip(name, "payload's sha256 differs from the manifest's")
                return None
            f.seek(0)
            try:
                payload = torch.load(f, map_location=map_location)
            except Exception as e:  # an unpickling failure of any kind
                self._skip(name, f"torch.load failed: {type(e).__name__}: {e}")
                return None
        if not isinstance(payload, dict) or payload.get("format") != FORMAT or payload.get(
                "step") != step or "state" not in payload:
            self._skip(name, f"payload is not a {FORMAT} checkpoint of step {step}")
            return None
        return Loaded(payload["state"], step, payload.get("rng") or {}, payload.get("info") or {})

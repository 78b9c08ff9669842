"""Progress reports to the controller: POST {url}/api/v1/jobs/{job}/report.

report() never blocks the training and never raises: it hands the body to a
sender thread and returns. While a report is on its way the next ones are
merged into one (the newest fields win, `samples` add up), so a slow or
unreachable controller costs at most one request in flight with a timeout.
Failures are logged (the first at once, then at most once a minute with the
count) and the report is dropped.
"""
import json
import logging
import math
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Optional

log = logging.getLogger("spottrain")

LOG_EVERY_S = 60.0
MAX_METRICS = 64  # the controller refuses more


def _finite(value) -> Optional[float]:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def make_body(instance, rank, step, loss=None, samples=None, metrics=None, epoch=None,
              total_steps=None, done=False) -> dict:
    """The report's JSON object; fields the controller would refuse (a loss
    or metric that is not a finite number, metrics past 64) are left out."""
    body = {"instance": instance or "", "rank": int(rank), "step": int(step)}
    if total_steps is not None:
        body["total_steps"] = int(total_steps)
    if epoch is not None:
        body["epoch"] = int(epoch)
    if loss is not None and _finite(loss) is not None:
        body["loss"] = _finite(loss)
    if samples is not None:
        body["samples"] = int(samples)
    if metrics:
        clean = {str(k): _finite(v) for k, v in metrics.items()}
        clean = {k: v for k, v in clean.items() if v is not None}
        body["metrics"] = dict(list(clean.items())[:MAX_METRICS])
    if done:
        body["done"] = True
    return body


def _merge(old: Optional[dict], new: dict) -> dict:
    if old is None:
        return new
    merged = dict(new)
    if "samples" in old or "samples" in new:
        merged["samples"] = old.get("samples", 0) + new.get("samples", 0)
    merged["done"] = old.get("done", False) or new.get("done", False)
    if not merged["done"]:
        del merged["done"]
    return merged


class Reporter:
    """Sends reports of job `job` to the controller at `url` with the token
    read from `token_file`. Thread-safe."""

    def __init__(self, url: str, job: str, token_file: Optional[str], timeout_s: float = 2.0):
        self.endpoint = (url.rstrip("/") + "/api/v1/jobs/" + urllib.parse.quote(job, safe="") +
                         "/report")
        self._token_file = token_file
        self._timeout_s = timeout_s
        # The controller is on loopback: never through an http_proxy.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self._cv = threading.Condition()
        self._pending = None
        self._busy = False
        self._closed = False
        self._thread = None
        self._last_ok = True
        self._failures = 0  # since the last one logged
        self._last_logged = None
        self.sent = 0  # reports the controller accepted

    def submit(self, body: dict) -> None:
        with self._cv:
            if self._closed:
                return
            self._pending = _merge(self._pending, body)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="spottrain-report",
                                                daemon=True)
                self._thread.start()
            self._cv.notify_all()

    def flush(self, timeout_s: Optional[float] = None) -> bool:
        """Waits until nothing is pending or in flight (at most `timeout_s`);
        True when the last report sent was accepted and none is left."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cv:
            while self._pending is not None or self._busy:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cv.wait(left)
            return self._last_ok

    def close(self, timeout_s: float = 5.0) -> None:
        """Sends what is pending (waiting at most `timeout_s`), then stops."""
        self.flush(timeout_s)
        with self._cv:
            self._closed = True
            self._cv.notify_all()

    def _run(self):
        while True:
            with self._cv:
                while self._pending is None and not self._closed:
                    self._cv.wait()
                if self._pending is None:
                    return
                body, self._pending, self._busy = self._pending, None, True
            ok = self._post(body)
            with self._cv:
                self._busy = False
                self._last_ok = ok
                self._cv.notify_all()

    def _token(self) -> str:
        if self._token_file is None:
            raise OSError("SPOT_TOKEN_FILE is not set")
        with open(self._token_file, encoding="utf-8") as f:
            return f.readline().strip()

    def _post(self, body: dict) -> bool:
        try:
            token = self._token()
        except OSError as e:
            self._failed(f"token file {self._token_file}: {e}")
            return False
        request = urllib.request.Request(
            self.endpoint, data=json.dumps(body).encode(), method="POST",
            headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
        try:
            with self._opener.open(request, timeout=self._timeout_s) as response:
                response.read()
        except urllib.error.HTTPError as e:
            self._failed(f"HTTP {e.code}: {self._error_text(e)}")
            return False
        except Exception as e:  # URLError, timeouts, resets: never into the training
            reason = getattr(e, "reason", None) or e
            self._failed(f"{type(e).__name__}: {reason}")
            return False
        with self._cv:
            self.sent += 1
        if not self._last_ok:
            log.info("spottrain: reports reach %s again", self.endpoint)
        return True

    @staticmethod
    def _error_text(e) -> str:
        try:
            return str(json.loads(e.read()).get("error", e.reason))
        except Exception:
            return str(e.reason)

    def _failed(self, reason: str) -> None:
        self._failures += 1
        now = time.monotonic()
        if self._last_logged is None or now - self._last_logged >= LOG_EVERY_S:
            more = (f" ({self._failures - 1} more reports dropped since the last message)"
                    if self._failures > 1 else "")
            log.warning("spottrain: report to %s dropped: %s%s", self.endpoint, reason, more)
            self._last_logged = now
            self._failures = 0

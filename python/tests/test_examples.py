"""The examples as real processes: stopped by SIGTERM mid-run (exit 0, saved),
resumed, and compared with an uninterrupted run loss by loss."""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SINGLE = os.path.join(ROOT, "examples", "pytorch-fashion-mnist", "train.py")
DDP = os.path.join(ROOT, "examples", "pytorch-ddp", "train.py")
DATA = "/usr/share/datasets/fashion-mnist"


def read_losses(path):
    """{step: loss text}; a step run twice (after the last save, before the
    stop) keeps its last line."""
    out = {}
    with open(path) as f:
        for line in f:
            step, loss = line.strip().split(",")
            out[int(step)] = loss
    return out


def wait_for_lines(path, count, procs):
    while True:
        if os.path.exists(path):
            with open(path) as f:
                if sum(1 for _ in f) >= count:
                    return
        for p in procs:
            if p.poll() is not None:
                raise AssertionError(f"{p.args} ended early with {p.returncode}")
        time.sleep(0.02)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@unittest.skipUnless(os.path.isdir(DATA), "Fashion-MNIST (dataset-fashion-mnist) not installed")
class ExamplesTest(unittest.TestCase):
    STEPS = 40

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def start(self, script, name, rank=None, world=None, port=None, extra=()):
        d = os.path.join(self.tmp.name, name)
        os.makedirs(d, exist_ok=True)
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"),
                   SPOT_CHECKPOINT_DIR=os.path.join(d, "ckpt"))
        for k in ("SPOT_JOB", "SPOT_CONTROLLER_URL", "SPOT_NOTICE_FILE", "RANK", "WORLD_SIZE"):
            env.pop(k, None)
        if rank is not None:
            env.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(port))
        cmd = [sys.executable, script, "--data", DATA, "--steps", str(self.STEPS),
               "--save-every", "15", "--loss-log", os.path.join(d, "loss.csv"), *extra]
        return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)

    def finish(self, procs):
        results = [(p.wait(), *p.communicate()) for p in procs]
        for code, out, err in results:
            self.assertEqual(code, 0, err)
        return results

    def test_single_process_stops_on_sigterm_and_resumes_bit_for_bit(self):
        self.finish([self.start(SINGLE, "a")])
        slow = self.start(SINGLE, "b", extra=["--slow-step-ms", "40"])
        wait_for_lines(os.path.join(self.tmp.name, "b", "loss.csv"), 20, [slow])
        slow.send_signal(signal.SIGTERM)
        [(_, out, err)] = self.finish([slow])
        self.assertNotIn("test accuracy", out)  # stopped: nothing after the loop ran
        self.assertIn("stopped for a notice", err)
        [(_, out, _)] = self.finish([self.start(SINGLE, "b")])
        self.assertIn(f"after {self.STEPS} steps", out)
        want = read_losses(os.path.join(self.tmp.name, "a", "loss.csv"))
        self.assertEqual(sorted(want), list(range(1, self.STEPS + 1)))
        self.assertEqual(read_losses(os.path.join(self.tmp.name, "b", "loss.csv")), want)

    def test_ddp_ranks_stop_together_and_resume_bit_for_bit(self):
        port = free_port()
        self.finish([self.start(DDP, "a", r, 2, port) for r in (0, 1)])
        port = free_port()
        ranks = [self.start(DDP, "b", r, 2, port, ["--slow-step-ms", "40"]) for r in (0, 1)]
        wait_for_lines(os.path.join(self.tmp.name, "b", "loss.csv"), 20, ranks)
        ranks[1].send_signal(signal.SIGTERM)  # one rank's notice stops both
        results = self.finish(ranks)
        self.assertIn("stopped for a notice", results[0][2])
        port = free_port()
        results = self.finish([self.start(DDP, "b", r, 2, port) for r in (0, 1)])
        self.assertIn(f"after {self.STEPS} steps on 2 ranks", results[0][1])
        want = read_losses(os.path.join(self.tmp.name, "a", "loss.csv"))
        self.assertEqual(sorted(want), list(range(1, self.STEPS + 1)))
        self.assertEqual(read_losses(os.path.join(self.tmp.name, "b", "loss.csv")), want)

    def test_bad_input_exits_2_naming_it(self):
        p = self.start(SINGLE, "c", extra=["--data", os.path.join(self.tmp.name, "none")])
        _, err = p.communicate()
        self.assertEqual(p.returncode, 2)
        self.assertIn("train-images-idx3-ubyte.gz", err)
        p = self.start(SINGLE, "c", extra=["--steps", "0"])
        _, err = p.communicate()
        self.assertEqual(p.returncode, 2)
        self.assertIn("--steps must be >= 1", err)


if __name__ == "__main__":
    unittest.main()

"""Reports against a real HTTP server on loopback, and against none."""
import http.server
import json
import os
import socket
import tempfile
import threading
import unittest

import spottrain


class Controller:
    """A stand-in for the controller's report endpoint: records each request,
    answers `status` with `body`; `hold` blocks answers until set."""

    def __init__(self, status=200, body=None):
        self.requests = []
        self.status = status
        self.body = body if body is not None else {"ok": True}
        self.hold = threading.Event()
        self.hold.set()
        self.received = threading.Semaphore(0)
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):

            def do_POST(self):
                data = self.rfile.read(int(self.headers["Content-Length"]))
                outer.requests.append((self.path, dict(self.headers), json.loads(data)))
                outer.received.release()
                outer.hold.wait()
                reply = json.dumps(outer.body).encode()
                self.send_response(outer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self):
        self.hold.set()
        self.server.shutdown()
        self.server.server_close()


class ReportTest(unittest.TestCase):

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.token_file = os.path.join(self.tmp.name, "token")
        with open(self.token_file, "w") as f:
            f.write("s3cret-token\n")

    def tearDown(self):
        self.tmp.cleanup()

    def controller(self, **kw):
        c = Controller(**kw)
        self.addCleanup(c.close)
        return c

    def session(self, url, rank=0, job="exp/1", timeout_s=2.0, token_file=None, **kw):
        env = {"SPOT_JOB": job, "SPOT_INSTANCE": "i-7", "SPOT_CONTROLLER_URL": url,
               "SPOT_TOKEN_FILE": token_file or self.token_file, "RANK": str(rank),
               "WORLD_SIZE": "2", "SPOT_CHECKPOINT_DIR": self.tmp.name}
        s = spottrain.Session(environ=env, install_handler=False, report_timeout_s=timeout_s,
                              **kw)
        self.addCleanup(s.close)
        return s

    def test_report_posts_the_body_with_the_token(self):
        c = self.controller()
        s = self.session(c.url)
        s.report(12, loss=0.5, samples=64, metrics={"lr": 0.001, "acc": 0.75}, epoch=1,
                 total_steps=100)
        self.assertTrue(s.flush())
        self.assertEqual(len(c.requests), 1)
        path, headers, body = c.requests[0]
        self.assertEqual(path, "/api/v1/jobs/exp%2F1/report")
        self.assertEqual(headers["Authorization"], "Bearer s3cret-token")
        self.assertEqual(headers["Content-Type"], "application/json")
        self.assertEqual(body, {"instance": "i-7", "rank": 0, "step": 12, "total_steps": 100,
                                "epoch": 1, "loss": 0.5, "samples": 64,
                                "metrics": {"lr": 0.001, "acc": 0.75}})
        self.assertEqual(s.reports_sent, 1)

    def test_final_report_is_delivered_before_report_returns(self):
        c = self.controller()
        s = self.session(c.url)
        s.report(100, total_steps=100, done=True)
        self.assertEqual([r[2] for r in c.requests],
                         [{"instance": "i-7", "rank": 0, "step": 100, "total_steps": 100,
                           "done": True}])

    def test_only_rank_0_reports_by_default(self):
        c = self.controller()
        s = self.session(c.url, rank=1)
        s.report(3, loss=1.0, done=True)
        self.assertTrue(s.flush())
        self.assertEqual(c.requests, [])
        everyone = self.session(c.url, rank=1, report_all_ranks=True)
        everyone.report(3)
        self.assertTrue(everyone.flush())
        self.assertEqual([r[2]["rank"] for r in c.requests], [1])

    def test_reports_queued_behind_a_slow_one_are_merged(self):
        c = self.controller()
        c.hold.clear()
        s = self.session(c.url)
        s.report(1, samples=10, loss=3.0)
        c.received.acquire()  # the first is in flight, held by the server
        s.report(2, samples=10, loss=2.0)
        s.report(3, samples=10, loss=1.0, metrics={"m": 1.0})
        c.hold.set()
        self.assertTrue(s.flush())
        self.assertEqual([r[2]["step"] for r in c.requests], [1, 3])
        self.assertEqual(c.requests[1][2]["samples"], 20)
        self.assertEqual(c.requests[1][2]["loss"], 1.0)

    def test_non_finite_numbers_are_left_out(self):
        c = self.controller()
        s = self.session(c.url)
        s.report(5, loss=float("nan"), metrics={"a": float("inf"), "b": 2.0})
        self.assertTrue(s.flush())
        self.assertEqual(c.requests[0][2],
                         {"instance": "i-7", "rank": 0, "step": 5, "metrics": {"b": 2.0}})

    def test_refused_reports_are_dropped_and_logged_once(self):
        c = self.controller(status=400, body={"error": "step: must be an integer >= 0"})
        s = self.session(c.url)
        with self.assertLogs("spottrain", "WARNING") as logs:
            s.report(1)
            self.assertFalse(s.flush())
            s.report(2)
            self.assertFalse(s.flush())
        self.assertEqual(len(logs.output), 1)
        self.assertIn("HTTP 400: step: must be an integer >= 0", logs.output[0])
        self.assertEqual(len(c.requests), 2)

    def test_unreachable_controller_does_not_raise(self):
        with socket.socket() as sock:  # a port nobody listens on
            sock.bind(("127.0.0.1", 0))
            url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        s = self.session(url)
        with self.assertLogs("spottrain", "WARNING") as logs:
            s.report(1, loss=1.0)
            s.report(2, loss=1.0, done=True)  # returns after the bounded wait
            self.assertFalse(s.flush())
        self.assertIn("report to " + url, logs.output[0])
        self.assertIn("Connection refused", logs.output[0])

    def test_controller_that_never_answers_times_out(self):
        with socket.socket() as sock:  # accepts connections (backlog), never answers
            sock.bind(("127.0.0.1", 0))
            sock.listen(8)
            s = self.session(f"http://127.0.0.1:{sock.getsockname()[1]}", timeout_s=0.2)
            with self.assertLogs("spottrain", "WARNING") as logs:
                s.report(1)
                self.assertFalse(s.flush(timeout_s=30))
            self.assertIn("timed out", logs.output[0])

    def test_missing_token_file_is_named(self):
        c = self.controller()
        missing = os.path.join(self.tmp.name, "no-token")
        s = self.session(c.url, token_file=missing)
        with self.assertLogs("spottrain", "WARNING") as logs:
            s.report(1)
            self.assertFalse(s.flush())
        self.assertIn("token file " + missing, logs.output[0])
        self.assertEqual(c.requests, [])

    def test_without_a_controller_report_does_nothing(self):
        s = spottrain.Session(environ={"SPOT_CHECKPOINT_DIR": self.tmp.name},
                              install_handler=False)
        s.report(1, loss=1.0, done=True)
        self.assertTrue(s.flush())
        self.assertEqual(s.reports_sent, 0)


if __name__ == "__main__":
    unittest.main()

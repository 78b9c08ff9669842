"""Notices: the signal, the notice file, and the variables."""
import json
import os
import signal
import tempfile
import time
import unittest

import spottrain


class NoticeTest(unittest.TestCase):

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.file = os.path.join(self.tmp.name, "notice.json")
        self.calls = []

    def tearDown(self):
        self.tmp.cleanup()

    def session(self, **env):
        environ = {"SPOT_NOTICE_FILE": self.file,
                   "SPOT_CHECKPOINT_DIR": os.path.join(self.tmp.name, "c")}
        environ.update(env)
        s = spottrain.Session(environ=environ, on_notice=self.calls.append)
        self.addCleanup(s.close)
        return s

    def test_sigterm_sets_should_stop_and_calls_on_notice_once(self):
        s = self.session()
        self.assertFalse(s.should_stop())
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs before the next bytecode
        self.assertTrue(s.should_stop())
        self.assertTrue(s.should_stop())
        self.assertEqual(self.calls, [None])  # a signal without a file: no notice object
        self.assertIsNone(s.notice())
        self.assertIsNone(s.deadline_s())

    def test_configured_signal_is_handled_and_the_old_handler_restored(self):
        before = signal.getsignal(signal.SIGUSR1)
        s = self.session(SPOT_NOTICE_SIGNAL="SIGUSR1")
        self.assertIsNot(signal.getsignal(signal.SIGUSR1), before)
        os.kill(os.getpid(), signal.SIGUSR1)
        self.assertTrue(s.should_stop())
        s.close()
        self.assertIs(signal.getsignal(signal.SIGUSR1), before)

    def test_notice_file_sets_should_stop_with_notice_and_deadline(self):
        s = self.session()
        self.assertFalse(s.should_stop())
        now = time.time()
        notice = {"notice_unix_s": now, "deadline_unix_s": now + 120, "action": "terminate",
                  "source": "aws"}
        with open(self.file, "w") as f:
            json.dump(notice, f)
        self.assertTrue(s.should_stop())
        self.assertEqual(s.notice(), notice)
        self.assertEqual(self.calls, [notice])
        left = s.deadline_s()
        self.assertGreater(left, 0)
        self.assertLessEqual(left, 120)
        self.assertEqual(s._watcher.deadline_s(now=now + 200), 0.0)

    def test_malformed_notice_file_still_stops_and_is_warned_about(self):
        s = self.session()
        with open(self.file, "w") as f:
            f.write("[1, 2")
        with self.assertLogs("spottrain", "WARNING") as logs:
            self.assertTrue(s.should_stop())
        self.assertIn(self.file, logs.output[0])
        self.assertIn("not JSON", logs.output[0])
        self.assertEqual(self.calls, [None])
        self.assertIsNone(s.deadline_s())

    def test_save_runs_a_pending_on_notice_first(self):
        s = self.session()
        os.kill(os.getpid(), signal.SIGTERM)
        s.save({"x": 1}, 1)
        self.assertEqual(self.calls, [None])


class EnvTest(unittest.TestCase):

    def test_by_hand_is_rank_0_of_1_without_controller(self):
        env = spottrain.read_env({})
        self.assertEqual((env.rank, env.world_size, env.local_rank), (0, 1, 0))
        self.assertFalse(env.under_spottrain)
        self.assertEqual(env.notice_signal, "SIGTERM")

    def test_variables_are_read(self):
        env = spottrain.read_env({
            "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
            "NODE_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500",
            "SPOT_JOB": "j", "SPOT_INSTANCE": "i-1", "SPOT_CHECKPOINT_DIR": "/d",
            "SPOT_NOTICE_FILE": "/n", "SPOT_CONTROLLER_URL": "http://127.0.0.1:1",
            "SPOT_TOKEN_FILE": "/t", "SPOT_NOTICE_SIGNAL": "SIGUSR2"})
        self.assertEqual((env.rank, env.world_size, env.local_rank, env.local_world_size,
                          env.node_rank, env.master_addr, env.master_port),
                         (3, 4, 1, 2, 1, "10.0.0.1", 29500))
        self.assertEqual((env.job, env.instance, env.checkpoint_dir, env.notice_file,
                          env.controller_url, env.token_file, env.notice_signal),
                         ("j", "i-1", "/d", "/n", "http://127.0.0.1:1", "/t", "SIGUSR2"))

    def test_bad_values_name_the_variable(self):
        for env, words in [({"RANK": "x"}, "RANK: expected an integer"),
                           ({"WORLD_SIZE": "0"}, "WORLD_SIZE: must be >= 1"),
                           ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK: 2 is not below"),
                           ({"SPOT_NOTICE_SIGNAL": "SIGKILL"}, "notice signal 'SIGKILL'"),
                           ({"SPOT_CONTROLLER_URL": "127.0.0.1:8"}, "SPOT_CONTROLLER_URL")]:
            with self.assertRaisesRegex(spottrain.ConfigError, words):
                spottrain.read_env(env)
        with self.assertRaisesRegex(spottrain.ConfigError, "SPOT_JOB"):
            spottrain.Session(environ={"SPOT_CONTROLLER_URL": "http://127.0.0.1:1"},
                              install_handler=False)


if __name__ == "__main__":
    unittest.main()

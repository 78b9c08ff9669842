"""Checkpoint versions: atomic save, verified load, damage skipped, retention."""
import json
import os
import tempfile
import unittest

import torch

import spottrain
from spottrain import CheckpointStore


def state_of(step):
    return {"w": torch.arange(1000, dtype=torch.float32) + step, "step_copy": step,
            "nested": {"name": f"v{step}", "list": [step, step * 2]}}


class CheckpointStoreTest(unittest.TestCase):

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = os.path.join(self.tmp.name, "ckpt")
        self.store = CheckpointStore(self.dir, keep=3)

    def tearDown(self):
        self.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)

    def assert_version(self, loaded, step):
        self.assertIsNotNone(loaded)
        self.assertEqual(loaded.step, step)
        self.assertTrue(torch.equal(loaded.state["w"], state_of(step)["w"]))
        self.assertEqual(loaded.state["step_copy"], step)
        self.assertEqual(loaded.state["nested"], state_of(step)["nested"])

    def test_empty_directory_loads_nothing(self):
        self.assertIsNone(self.store.load())
        self.assertEqual(self.store.steps(), [])

    def test_save_writes_payload_and_manifest_and_no_temporaries(self):
        path = self.store.save(state_of(7), 7)
        self.assertEqual(path, self.path("ckpt-000000000007.pt"))
        self.assertEqual(sorted(os.listdir(self.dir)),
                         ["ckpt-000000000007.json", "ckpt-000000000007.pt"])
        with open(self.path("ckpt-000000000007.json")) as f:
            m = json.load(f)
        self.assertEqual(m["format"], "spottrain-ckpt-1")
        self.assertEqual(m["step"], 7)
        self.assertEqual(m["file"], "ckpt-000000000007.pt")
        self.assertEqual(m["size"], os.path.getsize(path))
        import hashlib
        with open(path, "rb") as f:
            self.assertEqual(m["sha256"], hashlib.sha256(f.read()).hexdigest())
        self.assertIsInstance(m["unix_s"], float)
        self.assert_version(self.store.load(), 7)

    def test_newest_valid_version_wins(self):
        for s in (10, 20, 30):
            self.store.save(state_of(s), s)
        self.assert_version(self.store.load(), 30)
        self.assert_version(self.store.load(step=20), 20)

    def damage_newest_then_expect_20(self, damage, reason):
        for s in (10, 20, 30):
            self.store.save(state_of(s), s)
        damage()
        with self.assertLogs("spottrain", "WARNING") as logs:
            self.assert_version(self.store.load(), 20)
        self.assertIn("ckpt-000000000030", logs.output[0])
        self.assertIn(reason, logs.output[0])

    def test_truncated_payload_is_skipped(self):
        p = self.path("ckpt-000000000030.pt")
        self.damage_newest_then_expect_20(lambda: os.truncate(p, os.path.getsize(p) - 100),
                                          "bytes, the manifest says")

    def test_flipped_byte_is_skipped(self):
        p = self.path("ckpt-000000000030.pt")

        def flip():
            with open(p, "r+b") as f:
                f.seek(os.path.getsize(p) // 2)
                b = f.read(1)
                f.seek(-1, os.SEEK_CUR)
                f.write(bytes([b[0] ^ 0x01]))

        self.damage_newest_then_expect_20(flip, "sha256 differs")

    def test_bad_manifest_is_skipped(self):
        p = self.path("ckpt-000000000030.json")

        def garble():
            with open(p, "w") as f:
                f.write('{"format": "spottrain-ckpt-1", "step": ')

        self.damage_newest_then_expect_20(garble, "manifest unreadable")

    def test_manifest_naming_another_file_is_skipped(self):
        p = self.path("ckpt-000000000030.json")

        def redirect():
            with open(p) as f:
                m = json.load(f)
            m["file"] = "../elsewhere.pt"
            with open(p, "w") as f:
                json.dump(m, f)

        self.damage_newest_then_expect_20(redirect, "manifest field file")

    def test_missing_payload_is_skipped(self):
        self.damage_newest_then_expect_20(
            lambda: os.unlink(self.path("ckpt-000000000030.pt")), "payload unreadable")

    def test_payload_that_does_not_unpickle_is_skipped(self):
        # Size and hash agree with the manifest, but the bytes are no checkpoint.
        p = self.path("ckpt-000000000030.pt")

        def replace():
            import hashlib
            junk = b"not a torch file" * 10
            with open(p, "wb") as f:
                f.write(junk)
            mp = self.path("ckpt-000000000030.json")
            with open(mp) as f:
                m = json.load(f)
            m.update(size=len(junk), sha256=hashlib.sha256(junk).hexdigest())
            with open(mp, "w") as f:
                json.dump(m, f)

        self.damage_newest_then_expect_20(replace, "torch.load failed")

    def test_payload_without_manifest_is_not_a_version(self):
        self.store.save(state_of(10), 10)
        with open(self.path("ckpt-000000000020.pt"), "wb") as f:  # crashed before the commit
            f.write(b"partial")
        self.assert_version(self.store.load(), 10)
        self.assertEqual(self.store.steps(), [10])

    def test_every_version_damaged_loads_nothing(self):
        self.store.save(state_of(10), 10)
        os.truncate(self.path("ckpt-000000000010.pt"), 5)
        with self.assertLogs("spottrain", "WARNING"):
            self.assertIsNone(self.store.load())

    def test_keeps_newest_three_and_cleans_leftovers(self):
        with open(self.path_after_mkdir(".ckpt-ckpt-000000000001.pt.tmp-1-dead"), "wb") as f:
            f.write(b"left by a killed writer")
        for s in range(1, 7):
            self.store.save(state_of(s), s)
        self.assertEqual(self.store.steps(), [6, 5, 4])
        self.assertEqual(sorted(os.listdir(self.dir)), [
            "ckpt-000000000004.json", "ckpt-000000000004.pt", "ckpt-000000000005.json",
            "ckpt-000000000005.pt", "ckpt-000000000006.json", "ckpt-000000000006.pt"
        ])
        for s in (4, 5, 6):
            self.assert_version(self.store.load(step=s), s)

    def path_after_mkdir(self, name):
        os.makedirs(self.dir, exist_ok=True)
        return self.path(name)

    def test_keep_none_keeps_all(self):
        store = CheckpointStore(self.dir, keep=None)
        for s in range(1, 6):
            store.save(state_of(s), s)
        self.assertEqual(store.steps(), [5, 4, 3, 2, 1])

    def test_saving_an_earlier_step_removes_later_versions(self):
        # A run that resumed from 20 (30 was damaged) must not find 30 next time.
        for s in (10, 20, 30):
            self.store.save(state_of(s), s)
        with self.assertLogs("spottrain", "WARNING") as logs:
            self.store.save(state_of(25), 25)
        self.assertIn("[30]", logs.output[0])
        self.assertEqual(self.store.steps(), [25, 20, 10])
        self.assert_version(self.store.load(), 25)

    def test_bad_arguments_are_refused(self):
        with self.assertRaisesRegex(ValueError, "keep"):
            CheckpointStore(self.dir, keep=0)
        with self.assertRaisesRegex(ValueError, "step"):
            self.store.save({}, -1)


class SessionCheckpointTest(unittest.TestCase):

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def session(self, rank=0, world=2, **kw):
        env = {"RANK": str(rank), "WORLD_SIZE": str(world),
               "SPOT_CHECKPOINT_DIR": os.path.join(self.tmp.name, "shared")}
        return spottrain.Session(environ=env, install_handler=False, **kw)

    def test_only_rank_0_writes_and_every_rank_reads(self):
        self.assertIsNone(self.session(rank=1).save({"x": 1}, 5))
        self.assertEqual(self.session(rank=1).checkpoint_steps(), [])
        self.assertIsNotNone(self.session(rank=0).save({"x": 2}, 5))
        self.assertEqual(self.session(rank=1).load(), ({"x": 2}, 5))

    def test_all_ranks_write_their_own_subdirectory(self):
        for r in (0, 1):
            self.session(rank=r).save({"rank": r}, 3, all_ranks=True)
        for r in (0, 1):
            self.assertEqual(self.session(rank=r).load(all_ranks=True), ({"rank": r}, 3))
        self.assertIsNone(self.session(rank=0).load())  # the shared versions are separate

    def test_spot_checkpoint_dir_wins_over_the_argument(self):
        s = self.session(checkpoint_dir=os.path.join(self.tmp.name, "mine"))
        self.assertEqual(s.checkpoint_dir, os.path.join(self.tmp.name, "shared"))
        by_hand = spottrain.Session(environ={}, install_handler=False,
                                    checkpoint_dir=os.path.join(self.tmp.name, "mine"))
        self.assertEqual(by_hand.checkpoint_dir, os.path.join(self.tmp.name, "mine"))
        default = spottrain.Session(environ={}, install_handler=False)
        self.assertEqual(default.checkpoint_dir, os.path.abspath("checkpoints"))


if __name__ == "__main__":
    unittest.main()

// End-to-end tests of TorchScript models: modules scripted in Python
// (examples/torchscript), trained natively by `spot train` and `spot train
// --nproc 2`, compared step for step with the same training in Python, and
// loaded back in Python with the accuracy the trainer reported.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "apps/spot/e2e_support.h"
#include "apps/spot/test_process.h"
#include "core/file_io.h"
#include "core/job_files.h"

namespace spot {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::kDataset;
using testing::ProcessResult;
using testing::ReadStepLog;
using testing::RunProcess;
using testing::StepLog;

constexpr const char* kPython = "/usr/bin/python3";
constexpr const char* kExamples = SPOT_SOURCE_DIR "/examples/torchscript";

class TorchScriptTest : public testing::E2eTest {
 protected:
  void SetUp() override {
    E2eTest::SetUp();
    if (!fs::exists(kPython)) GTEST_SKIP() << "no " << kPython << ": cannot script the models";
    ProcessResult r = RunProcess(
        {kPython, std::string(kExamples) + "/export.py", "--out", (dir_ / "modules").string()},
        (dir_ / "export").string());
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  std::string Module(const std::string& name) {
    return (dir_ / "modules" / (name + ".pt")).string();
  }
  std::string Job(const std::string& name, const std::string& module, int64_t batch, int64_t steps,
                  int64_t train_limit, const std::string& extra = "",
                  const std::string& optimizer = "adam\n  lr: 0.001", int64_t interval = 100) {
    return fmt::format(
        "name: {}\nmodel:\n  torchscript: {}\ndataset:\n  path: {}\n  train_limit: {}\n"
        "  test_limit: 500\nbatch_size: {}\nsteps: {}\nseed: 5\nthreads: 1\n"
        "optimizer:\n  type: {}\ncheckpoint:\n  interval_steps: {}\n"
        "output_dir: {}\n{}",
        name, module, kDataset, train_limit, batch, steps, optimizer, interval,
        (dir_ / name).string(), extra);
  }
  json Evaluate(const std::string& module, const std::string& run) {
    ProcessResult py = RunProcess({kPython, std::string(kExamples) + "/evaluate.py", "--module",
                                   module, "--state", (dir_ / run / "model.pt").string(), "--data",
                                   kDataset, "--limit", "500", "--threads", "1"},
                                  (dir_ / (run + "_eval")).string());
    EXPECT_EQ(py.exit_code, 0) << py.err;
    return py.exit_code == 0 ? json::parse(py.out) : json();
  }
  json Summary(const std::string& run) {
    return json::parse(*ReadFile((dir_ / run / "summary.json").string()));
  }
};

// Python -> spot train -> Python: the first steps' losses are Python's own on
// the same batch and weights, and the trained weights load back in Python
// with the accuracy the trainer reported.
TEST_F(TorchScriptTest, AScriptedResNetTrainsAsInPythonAndLoadsBack) {
  constexpr int kSteps = 6;  // batches of 64 of 256 images: into the second epoch
  fs::path job = WriteJob("resnet", Job("resnet", Module("resnet"), 64, kSteps, 256, "",
                                        "sgd\n  lr: 0.05\n  momentum: 0.9"));
  ProcessResult r = Train(job, dir_ / "resnet.csv", "resnet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ProcessResult py = RunProcess({kPython,       std::string(kExamples) + "/reference_steps.py",
                                 "--module",    Module("resnet"),
                                 "--data",      kDataset,
                                 "--limit",     "256",
                                 "--batch",     "64",
                                 "--steps",     std::to_string(kSteps),
                                 "--optimizer", "sgd",
                                 "--lr",        "0.05",
                                 "--momentum",  "0.9",
                                 "--seed",      "5"},
                                (dir_ / "reference").string());
  ASSERT_EQ(py.exit_code, 0) << py.err;
  const json python_losses = json::parse(py.out);
  const std::vector<StepLogRow> cpp = spot::ReadStepLog((dir_ / "resnet.csv").string());
  ASSERT_EQ(cpp.size(), size_t{kSteps});
  for (int s = 1; s <= kSteps; ++s) {
    const StepLogRow& row = cpp[s - 1];
    ASSERT_EQ(row.step, s);
    std::cerr << fmt::format("  step {}: C++ {:.7f}, Python {:.7f}\n", s, row.loss,
                             python_losses[s - 1].get<double>());
    EXPECT_NEAR(row.loss, python_losses[s - 1].get<double>(), 1e-5) << "step " << s;
  }
  const json back = Evaluate(Module("resnet"), "resnet");
  EXPECT_EQ(back["count"], 500);
  EXPECT_NEAR(back["accuracy"].get<double>(), Summary("resnet")["test_accuracy"].get<double>(),
              1e-9);
  EXPECT_NEAR(back["loss"].get<double>(), Summary("resnet")["test_loss"].get<double>(), 1e-4);
  EXPECT_EQ(Summary("resnet")["model"], "torchscript:resnet.pt");
}

// The same module under two elastic workers, killed and resumed like a
// built-in model: its checkpoints hold the TorchScript module's parameters and buffers.
TEST_F(TorchScriptTest, AScriptedTransformerTrainsOnTwoWorkersAndResumes) {
  fs::path job = WriteJob("tf", Job("tf", Module("transformer"), 64, 40, 1280,
                                    "distributed: {max_workers: 2, join_window_s: 60}\n"));
  ProcessResult r = Spot({"train", job.string(), "--nproc", "2", "--plain"}, "tf");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json s = Summary("tf");
  EXPECT_EQ(s["steps"], 40);
  EXPECT_EQ(s["world"], 2);
  EXPECT_GT(s["test_accuracy"].get<double>(), 0.4) << "it learned";
  const json back = Evaluate(Module("transformer"), "tf");
  EXPECT_NEAR(back["accuracy"].get<double>(), s["test_accuracy"].get<double>(), 1e-9);

  // Ten more steps on one process resume from the workers' checkpoint.
  fs::path more = WriteJob("tf2", Job("tf", Module("transformer"), 64, 50, 1280));
  ProcessResult again = Train(more, "", "tf2");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.err.find("(local tier; step 40"), std::string::npos) << again.err;
  EXPECT_EQ(Summary("tf")["steps"], 50);
}

// Killed with SIGKILL mid-run and resumed, a TorchScript model continues bit
// for bit: the same loss at every later step, the same newest checkpoint.
TEST_F(TorchScriptTest, AKilledScriptedModelResumesBitForBit) {
  auto job = [&](const std::string& name) {
    return WriteJob(
        name, Job(name, Module("resnet"), 32, 40, 640, "", "adam\n  lr: 0.002", /*interval=*/5));
  };
  ASSERT_EQ(Train(job("ref"), dir_ / "ref.csv", "ref").exit_code, 0);
  {
    testing::ChildProcess p(TrainArgs(job("cut"), dir_ / "cut.csv"), (dir_ / "cut_a").string());
    while (p.Running() && testing::LastLoggedStep(dir_ / "cut.csv") < 17) ::usleep(500);
    p.Kill(SIGKILL);
    p.Wait();
  }
  ProcessResult resumed = Train(job("cut"), dir_ / "cut.csv", "cut_b");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("resuming from checkpoint"), std::string::npos) << resumed.err;
  const StepLog ref = ReadStepLog(dir_ / "ref.csv"), cut = ReadStepLog(dir_ / "cut.csv");
  ASSERT_EQ(cut.size(), 40u);
  for (int64_t s = 1; s <= 40; ++s) EXPECT_EQ(cut.at(s), ref.at(s)) << "step " << s;
  testing::ExpectSameNewestCheckpoint(dir_ / "ref" / "checkpoints", dir_ / "cut" / "checkpoints");
}

TEST_F(TorchScriptTest, BadModulesAreClearErrors) {
  fs::path junk = dir_ / "junk.pt";
  std::ofstream(junk) << "not a zip archive";
  ProcessResult bad = Train(WriteJob("junk", Job("junk", junk.string(), 16, 2, 64)), "", "junk");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find(junk.string() + ": not a TorchScript module"), std::string::npos)
      << bad.err;

  ProcessResult missing = Train(
      WriteJob("missing", Job("missing", (dir_ / "nope.pt").string(), 16, 2, 64)), "", "missing");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(
      missing.err.find("model.torchscript: " + (dir_ / "nope.pt").string() + ": no such file"),
      std::string::npos)
      << missing.err;

  // A module that does not map images to scores (TorchScript needs its source in a file).
  const fs::path script = dir_ / "scalar_module.py";
  std::ofstream(script) << "import sys, torch\n"
                           "class M(torch.nn.Module):\n"
                           "    def __init__(self):\n"
                           "        super().__init__()\n"
                           "        self.w = torch.nn.Parameter(torch.ones(3))\n"
                           "    def forward(self, x):\n"
                           "        return x.sum() * self.w.sum()\n"
                           "torch.jit.script(M()).save(sys.argv[1])\n";
  ProcessResult wrong = RunProcess({kPython, script.string(), (dir_ / "scalar.pt").string()},
                                   (dir_ / "scalar_export").string());
  ASSERT_EQ(wrong.exit_code, 0) << wrong.err;
  ProcessResult scalar = Train(
      WriteJob("scalar", Job("scalar", (dir_ / "scalar.pt").string(), 16, 2, 64)), "", "scalar");
  EXPECT_EQ(scalar.exit_code, 2);
  EXPECT_NE(scalar.err.find("expected [2, classes] floating-point scores"), std::string::npos)
      << scalar.err;
  EXPECT_FALSE(fs::exists(dir_ / "scalar" / "checkpoints")) << "nothing written for a bad model";
}

// Data of the user's own, as NumPy writes it: an .npz archive with Keras's
// array names (x_train, y_train, x_test, y_test; uint8 images [n, 28, 28]),
// and the same arrays in a safetensors file.
TEST_F(TorchScriptTest, NpzAndSafetensorsDataTrainBuiltInAndScriptedModels) {
  const fs::path script = dir_ / "make_npz.py";
  std::ofstream(script)
      << "import gzip, sys\n"
         "import numpy as np\n"
         "d, out = sys.argv[1], sys.argv[2]\n"
         "def read(name, offset, n, shape):\n"
         "    with gzip.open(d + '/' + name) as f:\n"
         "        return np.frombuffer(f.read(), np.uint8, offset=offset)[:n * int(np.prod(shape))]"
         ".reshape((n,) + shape)\n"
         "np.savez_compressed(out,\n"
         "    x_train=read('train-images-idx3-ubyte.gz', 16, 3200, (28, 28)),\n"
         "    y_train=read('train-labels-idx1-ubyte.gz', 8, 3200, ()).astype(np.int64),\n"
         "    x_test=read('t10k-images-idx3-ubyte.gz', 16, 500, (28, 28)),\n"
         "    y_test=read('t10k-labels-idx1-ubyte.gz', 8, 500, ()).astype(np.int64))\n"
         // The same arrays as safetensors, laid out by hand (header, then bytes).
         "import json, struct\n"
         "z = np.load(out)\n"
         "header, blobs, at = {}, [], 0\n"
         "for n in ['x_train', 'y_train', 'x_test', 'y_test']:\n"
         "    b = z[n].tobytes()\n"
         "    header[n] = {'dtype': {'uint8': 'U8', 'int64': 'I64'}[str(z[n].dtype)],\n"
         "                 'shape': list(z[n].shape), 'data_offsets': [at, at + len(b)]}\n"
         "    blobs.append(b)\n"
         "    at += len(b)\n"
         "h = json.dumps(header).encode()\n"
         "open(out + '.safetensors', 'wb').write(struct.pack('<Q', len(h)) + h + b''.join(blobs))\n"
         "np.savez(out + '.rgb.npz', x_train=np.zeros((8, 3, 8, 8), np.float32),\n"
         "    y_train=np.zeros(8, np.int64), x_test=np.zeros((8, 3, 8, 8), np.float32),\n"
         "    y_test=np.zeros(8, np.int64))\n";
  const fs::path npz = dir_ / "fashion.npz";
  ProcessResult made =
      RunProcess({kPython, script.string(), kDataset, npz.string()}, (dir_ / "make_npz").string());
  ASSERT_EQ(made.exit_code, 0) << made.err;
  auto job = [&](const std::string& name, const std::string& model, const fs::path& data) {
    const char* format = data.extension() == ".safetensors" ? "safetensors" : "npz";
    return WriteJob(name, fmt::format("name: {}\nmodel: {}\ndataset:\n  name: {}\n  path: {}\n"
                                      "batch_size: 32\nepochs: 1\nseed: 2\nthreads: 1\n"
                                      "optimizer:\n  type: adam\n  lr: 0.002\noutput_dir: {}\n",
                                      name, model, format, data.string(), (dir_ / name).string()));
  };
  ProcessResult cnn = Train(job("cnn", "cnn", npz), "", "cnn");
  ASSERT_EQ(cnn.exit_code, 0) << cnn.err;
  EXPECT_EQ(Summary("cnn")["steps"], 100);
  EXPECT_GT(Summary("cnn")["test_accuracy"].get<double>(), 0.6);
  // The same arrays from a safetensors file train the same model, bit for bit.
  ProcessResult st = Train(job("st", "cnn", npz.string() + ".safetensors"), "", "st");
  ASSERT_EQ(st.exit_code, 0) << st.err;
  EXPECT_EQ(Summary("st")["test_accuracy"], Summary("cnn")["test_accuracy"]);
  EXPECT_EQ(Summary("st")["test_loss"], Summary("cnn")["test_loss"]);
  ProcessResult ts = Train(job("ts", "{torchscript: " + Module("resnet") + "}", npz), "", "ts");
  ASSERT_EQ(ts.exit_code, 0) << ts.err;
  EXPECT_GT(Summary("ts")["test_accuracy"].get<double>(), 0.6);

  // Samples the built-in models do not take, and an archive cut short.
  ProcessResult rgb = Train(job("rgb", "cnn", npz.string() + ".rgb.npz"), "", "rgb");
  EXPECT_EQ(rgb.exit_code, 2);
  EXPECT_NE(rgb.err.find("model cnn takes [1, 28, 28] images; the data set's samples are "
                         "[3, 8, 8]"),
            std::string::npos)
      << rgb.err;
  const std::string bytes = *ReadFile(npz.string());
  const fs::path cut = dir_ / "cut.npz";
  ASSERT_TRUE(WriteFileAtomically(cut.string(), bytes.substr(0, bytes.size() - 100)).ok());
  ProcessResult bad = Train(job("bad", "cnn", cut), "", "bad");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find(cut.string() + ": not a NumPy .npz archive"), std::string::npos)
      << bad.err;
  EXPECT_FALSE(fs::exists(dir_ / "bad")) << "nothing written for bad data";
}

}  // namespace
}  // namespace spot

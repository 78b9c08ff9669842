// Fuzzes the job files: a `spot run` job (control/run_spec.h, its `train:`
// section read by train/train_spec.h, then what run_command.cc's LoadJob does
// with the YAML) and a `spot train` job (train::ParseTrainSpec), from one text.
//
// The reader checks that the files a spec names exist (data sets, TorchScript
// files, vocab.json, which it reads): relative to the working directory.
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>

#include "control/run_spec.h"
#include "core/spec_reader.h"
#include "fuzz_support.h"
#include "train/train_spec.h"

namespace {

void CheckInvalidArgument(const spot::Status& s) {
  FUZZ_CHECK(s.ok() || s.code() == spot::StatusCode::kInvalidArgument, s.ToString());
}

void RunJob(const std::string& text) {
  auto top = spot::SpecReader::FromString(text, "job.yaml");
  if (!top.ok()) return CheckInvalidArgument(top.status());
  spot::control::RunSpec run;
  spot::train::TrainSpec train;
  spot::control::ReadRunSpecFields(*top, &run);
  spot::train::ReadTrainSpecFields(top->Section("train", /*required=*/true), &train);
  spot::Status s = top->Finish();
  CheckInvalidArgument(s);
  if (!s.ok()) return;
  // A spec that passed: the bounds the policy relies on hold.
  spot::policy::JobSpec job = spot::control::ToPolicyJob(run);
  FUZZ_CHECK(job.compute_hours > 0 && job.deadline_hours >= job.compute_hours,
             "compute_hours / deadline_hours out of bounds");
  FUZZ_CHECK(job.min_nodes >= 1 && job.min_nodes <= job.nodes, "min_nodes / nodes out of bounds");
  // What LoadJob (apps/spot/run_command.cc) does next with the same text.
  YAML::Node root = YAML::Load(text);
  YAML::Node train_node = YAML::Clone(root["train"]);
  (void)train_node["output_dir"];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = spot::fuzz::AsString(data, size);
  RunJob(text);
  auto train = spot::train::ParseTrainSpec(text, "train.yaml");
  if (!train.ok()) CheckInvalidArgument(train.status());
  return 0;
}

// spot_bench's `gpt` workload: the built-in GPT (examples/gpt-bible.yaml's
// shape) trained by `spot train` and by the same model in Python PyTorch
// (examples/gpt-bible/reference.py) from the same initial weights on the same
// batches, one after the other: tokens/s of each and the validation loss each
// reaches. LibTorch-free header.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace spot::bench {

struct GptBenchOptions {
  int64_t steps = 1500;  // optimizer steps on each side
  int threads = 2;       // intra-op threads on both sides
  std::string spot_bin;  // build/bin/spot
  std::string python = "/usr/bin/python3";
  std::string reference;     // examples/gpt-bible/reference.py
  std::string job_template;  // examples/gpt-bible.yaml
  std::string work_dir;
};

Result<std::string> RunGptWorkload(const GptBenchOptions& options);

}  // namespace spot::bench

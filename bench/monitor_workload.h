// spot_bench's `monitor` workload: what SpotMonitor costs.
//   exposition: our text-format serializer against prometheus-cpp's own
//     TextSerializer on the same registries (a worker's and a controller's);
//     the parser the controller scrapes workers with;
//   event files: one TensorBoard event of 5 scalars, encoded, framed, CRC'd
//     and flushed, against writing the same bytes with fwrite + fflush;
//   training: 2 elastic `spot worker`s with and without their /metrics server,
//     event files and a scraper at 1 Hz, alternated, steps/s compared.
// LibTorch-free header.
#pragma once

#include <string>

#include "core/status.h"

namespace spot::bench {

struct MonitorBenchOptions {
  std::string spot_bin;
  std::string dataset_path = "/usr/share/datasets/fashion-mnist";
  std::string work_dir;
  int repeats = 2;         // training runs per configuration, alternated
  int64_t steps = 1200;    // per training run
  int expositions = 2000;  // serializations timed per serializer
  int events = 20000;      // TensorBoard events timed
};

Result<std::string> RunMonitorWorkload(const MonitorBenchOptions& options);

}  // namespace spot::bench

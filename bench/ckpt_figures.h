// The figures the `ckpt` workload measures (ckpt_workload.cc) and the report
// it writes of them (ckpt_report.cc). Internal to spot_bench; LibTorch-free.
#pragma once

#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ckpt/codec.h"
#include "ckpt/store.h"
#include "ckpt_workload.h"

namespace spot::bench {

constexpr int kWarmupSaves = 2;
constexpr int kTorchSaves = 3;       // torch::save reps (reference only)
constexpr int kLongDeltaSteps = 10;  // the "across 10 steps" delta
constexpr int kRestoreChainDepth = 3;
constexpr double kGoalBlocking = 1.5;    // ours / memcpy
constexpr double kGoalOverhead = 0.01;   // of training time, at the default interval
constexpr double kGoalFullRatio = 1.15;  // raw / the default full codec (planes-zstd)
constexpr double kGoalDeltaRatio = 1.7;  // raw / the default delta (sub-delta), one step
constexpr double kGoalCodecMbps = 500;   // per core, encode and decode

inline std::string Mb(double bytes) { return fmt::format("{:.1f}", bytes / 1e6); }
inline std::string Verdict(bool pass) { return pass ? "PASS" : "MISS"; }

// 1. Blocking time per save.
struct BlockingFigures {
  std::vector<double> ours_s, memcpy_s, torch_save_s;
  uint64_t snapshot_bytes = 0;  // payload of our snapshot
  uint64_t memcpy_bytes = 0;
  uint64_t torch_bytes = 0;  // torch::save's two files
};

// 2. Training-time overhead.
enum class Arm { kPlain = 0, kDefault = 1, kAggressive = 2 };
constexpr std::array<Arm, 3> kArms = {Arm::kPlain, Arm::kDefault, Arm::kAggressive};

struct RunFigures {
  double wall_s = 0;   // steps, saves' blocking, the job-start save, the final Flush
  double flush_s = 0;  // of which waiting for the last saves to be written
  int64_t steps = 0;
  int saves = 0;
  int delta_saves = 0;
  double blocking_s = 0;                            // sum over the run's saves
  std::vector<double> full_write_s, delta_write_s;  // writer thread, per save
  std::vector<double> step_s;                       // each step's time
  std::vector<bool> busy;                           // whether a write overlapped the step
  int64_t faults = 0;            // minor page faults the training thread took in its steps
  double policy_cost_s = 0;      // the IntervalPolicy's own estimate of one save's cost
  double policy_interval_s = 0;  // and the interval it would use next
  double other_cores = 0;
};

// 3. Bytes per save.
struct BytesRow {
  std::string what;
  uint64_t stored = 0;
  std::string codecs;
  std::string by_group;  // raw / stored of model/, exp_avg and exp_avg_sq records
  double goal = 0;       // the raw / stored ratio this row is judged by; 0 = none
};

// 4. Codec throughput.
struct CodecRow {
  ckpt::Codec codec;
  uint64_t raw_bytes = 0, stored_bytes = 0;
  double encode_s = 0, decode_s = 0;
};

// 5. Restore time.
// The raw threshold of the "stored raw" full version (CodecPlan::raw_below_saving).
inline constexpr double kRawFullBelowSaving = 0.25;

// Restarts in a new process, as after a preemption (MeasureRestarts in
// ckpt_durable.h): the child builds the model and optimizer (untimed), then
// restores; with the files in the page cache, and dropped from it first.
struct RestartTimes {
  std::vector<double> ours, torch, ours_cold, torch_cold;
};

struct RestoreFigures {
  std::vector<double> full_s, delta_s, torch_s;
  std::vector<double> full_load_s, delta_load_s;  // of which LoadNewestValid
  // The same two, decoding the parameters and buffers straight into the
  // model's tensors (ckpt::TensorPlacement).
  std::vector<double> full_placed_s, delta_placed_s, full_placed_load_s, delta_placed_load_s;
  // The same versions decoded by CheckpointFile directly: the full one on
  // every core and on one thread, the chain in one pass (ReadChain), each +
  // RestoreTrainState.
  std::vector<double> full_direct_s, full_serial_s, chain_s;
  std::vector<double> full_direct_load_s, full_serial_load_s, chain_load_s;  // of which the decode
  // The full state saved with every chunk that saves less than
  // kRawFullBelowSaving stored as is, restored into the model.
  std::vector<double> raw_full_placed_s, raw_full_placed_load_s;
  uint64_t raw_full_file_bytes = 0;
  int raw_full_raw_chunks = 0, raw_full_chunks = 0;
  // A restart in a new process: the full version into the model, and
  // torch::load.
  RestartTimes restart;
  int delta_depth = 0;
  uint64_t full_file_bytes = 0;
  // What writing them cost (AsyncSaver's writer thread): the full version and
  // each delta, and their file sizes.
  double full_write_s = 0;
  std::vector<double> delta_write_s;
  uint64_t delta_file_bytes = 0;  // the newest delta
};

// 6. Restarting from the durable tier (ckpt_durable.cc).
// The StoreOptions::durable_max_chain of each arm (kNoDurableChainLimit: byte
// for byte copies; 1: what jobs get; 0: every durable copy in full).
inline constexpr std::array<int, 3> kDurableMaxChains = {ckpt::kNoDurableChainLimit, 1, 0};
inline std::string DurableChainName(int max_chain) {
  return max_chain == ckpt::kNoDurableChainLimit ? "no limit" : std::to_string(max_chain);
}

// One version as an arm's AsyncSaver wrote and replicated it.
struct DurableVersion {
  int64_t id = 0;
  int local_depth = 0, durable_depth = 0;  // chain depth in each tier
  bool materialized = false;               // durable copy written in full
  double write_s = 0;                      // SaveReport::write_s (local tier)
  double replicate_s = 0;                  // SaveReport::replicate_s
  uint64_t local_bytes = 0, durable_bytes = 0;
};

struct DurableArm {
  int max_chain = 0;
  std::vector<DurableVersion> versions;  // oldest first
  // The restart: LoadNewestValid on a store whose local tier is new and empty.
  std::vector<double> restore_s, load_s;  // + RestoreTrainState, and of which LoadNewestValid
  // The same with the durable tier's files dropped from the page cache first.
  std::vector<double> cold_restore_s, cold_load_s;
  int64_t restored_id = 0;
  int restored_depth = 0;           // the chain depth the restore decoded
  uint64_t durable_tier_bytes = 0;  // what the durable tier held at the restart
};

struct DurableFigures {
  std::vector<DurableArm> arms;      // in kDurableMaxChains' order
  std::vector<double> torch_s;       // torch::load of the newest state
  std::vector<double> torch_cold_s;  // the same, its files dropped from the page cache first
  // The durable_max_chain 1 arm's newest version and torch::load, each
  // restarted in a new process.
  RestartTimes restart;
  double other_cores = 0;  // used by other processes during this section
};

// Everything measured for one training state.
struct SubjectFigures {
  std::string key, title;
  int64_t params = 0;
  int64_t run_steps = 0;
  double aggressive_s = 0;
  BlockingFigures blocking;
  std::map<Arm, std::vector<RunFigures>> runs;
  uint64_t payload = 0;
  std::vector<BytesRow> bytes;
  std::vector<CodecRow> codecs;
  RestoreFigures restore;
  DurableFigures durable;
  double other_cores = 0;  // used by other processes while this state was measured
};

// The workload's Markdown report.
std::string CkptReport(const CkptBenchOptions& o, const std::string& data_source,
                       const std::vector<SubjectFigures>& all, double elapsed_s);

}  // namespace spot::bench

// The `ckpt` workload's report: one section per measurement, each a table
// against its anchor with the goal and the raw numbers.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "ckpt_figures.h"
#include "report.h"

namespace spot::bench {
namespace {

std::vector<double> Scaled(const std::vector<double>& v, double k) {
  std::vector<double> out;
  for (double x : v) out.push_back(x * k);
  return out;
}

template <typename Fn>
std::vector<double> Map(const std::vector<RunFigures>& runs, Fn fn) {
  std::vector<double> out;
  for (const RunFigures& r : runs) out.push_back(fn(r));
  return out;
}

double StepsPerS(const RunFigures& r) { return static_cast<double>(r.steps) / r.wall_s; }

std::string BlockingSection(const std::vector<SubjectFigures>& all, const CkptBenchOptions& o) {
  Table t({"state", "snapshot MB", "ours ms", "memcpy ms", "ours / memcpy", "goal", "result",
           "torch::save ms", "torch::save / ours"});
  std::string raw;
  for (const SubjectFigures& f : all) {
    const BlockingFigures& b = f.blocking;
    double ours = Median(b.ours_s), anchor = Median(b.memcpy_s), ts = Median(b.torch_save_s);
    double ratio = ours / anchor;
    t.AddRow({f.title, Mb(static_cast<double>(b.snapshot_bytes)), fmt::format("{:.2f}", ours * 1e3),
              fmt::format("{:.2f}", anchor * 1e3), fmt::format("{:.3f}x", ratio),
              fmt::format("<= {:.1f}x", kGoalBlocking), Verdict(ratio <= kGoalBlocking),
              fmt::format("{:.1f}", ts * 1e3), fmt::format("{:.1f}x", ts / ours)});
    raw += fmt::format(
        "- {}: ours {}, memcpy {}, torch::save {} (ms; memcpy copies {} MB)\n", f.key,
        FormatList(Scaled(b.ours_s, 1e3), 2), FormatList(Scaled(b.memcpy_s, 1e3), 2),
        FormatList(Scaled(b.torch_save_s, 1e3), 1), Mb(static_cast<double>(b.memcpy_bytes)));
  }
  return fmt::format(
      "### 1. Blocking time per save\n\n"
      "Ours: AsyncSaver Acquire + Container::Recycle + CaptureTrainState + Submit, what "
      "trainer.cc's SaveCheckpoint makes training wait for (the encode and write run on the "
      "saver's thread, untimed here: each save waits for the previous write with Flush first). "
      "Median of {} saves after {} warm-up saves, so snapshot buffers are reused. Anchor: "
      "std::memcpy of the same parameter, buffer and Adam-moment tensors into preallocated, "
      "touched buffers, alternating with ours. torch::save: model and optimizer to two files "
      "(page cache, no fsync), median of {}.\n\n{}\nAll reps:\n{}",
      o.saves, kWarmupSaves, kTorchSaves, t.ToMarkdown(), raw);
}

std::string OverheadSection(const std::vector<SubjectFigures>& all, const CkptBenchOptions& o) {
  Table t({"state", "arm", "steps/run", "saves/run", "run s", "steps/s", "time vs plain", "goal",
           "result", "others"});
  Table s({"state", "C per save (measured)", "steps during writes", "steps after writes",
           "blocking + flush", "policy's estimate of C", "policy interval T", "C / T", "goal",
           "result"});
  std::string raw, writes;
  for (const SubjectFigures& f : all) {
    const auto& plain = f.runs.at(Arm::kPlain);
    std::vector<double> plain_walls = Map(plain, [](const RunFigures& r) { return r.wall_s; });
    double plain_wall = Median(plain_walls);
    // The spread of the plain runs: differences smaller than this are noise.
    double spread_s = *std::max_element(plain_walls.begin(), plain_walls.end()) -
                      *std::min_element(plain_walls.begin(), plain_walls.end());
    for (Arm arm : kArms) {
      const auto& runs = f.runs.at(arm);
      double wall = Median(Map(runs, [](const RunFigures& r) { return r.wall_s; }));
      double saves = Median(Map(runs, [](const RunFigures& r) { return double(r.saves); }));
      double overhead = wall / plain_wall - 1;
      std::string name = arm == Arm::kPlain ? "no checkpointing"
                         : arm == Arm::kDefault
                             ? "default policy (trainer.cc)"
                             : fmt::format("a save every {:g} s", f.aggressive_s);
      double others = Median(Map(runs, [](const RunFigures& r) { return r.other_cores; }));
      t.AddRow({f.title, name, fmt::format("{}", f.run_steps), fmt::format("{:g}", saves),
                fmt::format("{:.1f}", wall), fmt::format("{:.2f}", Median(Map(runs, StepsPerS))),
                arm == Arm::kPlain ? "" : fmt::format("{:+.2f}%", overhead * 100),
                arm == Arm::kDefault ? fmt::format("<= {:g}%", kGoalOverhead * 100) : "",
                arm != Arm::kDefault ? ""
                : overhead < 0
                    ? std::string("n/a (window; faster than plain: run-to-run variation)")
                : std::fabs(wall - plain_wall) < spread_s
                    ? fmt::format("{} (window; within the plain runs' spread, {:.0f}%)",
                                  Verdict(overhead <= kGoalOverhead), spread_s / plain_wall * 100)
                    : Verdict(overhead <= kGoalOverhead) + " (window)",
                fmt::format("{:.2f}", others)});
      raw += fmt::format(
          "- {} {}: steps/s {}, flush s {}, page faults per step {}, saves {}, "
          "others {} cores\n",
          f.key, name, FormatList(Map(runs, StepsPerS), 2),
          FormatList(Map(runs, [](const RunFigures& r) { return r.flush_s; }), 2),
          FormatList(
              Map(runs, [](const RunFigures& r) { return double(r.faults) / double(r.steps); })),
          FormatList(Map(runs, [](const RunFigures& r) { return double(r.saves); })),
          FormatList(Map(runs, [](const RunFigures& r) { return r.other_cores; }), 2));
      if (arm != Arm::kPlain) {
        std::vector<double> full, delta;
        for (const RunFigures& r : runs) {
          full.insert(full.end(), r.full_write_s.begin(), r.full_write_s.end());
          delta.insert(delta.end(), r.delta_write_s.begin(), r.delta_write_s.end());
        }
        writes += fmt::format("- {} {}: full {} ms, delta {} ms\n", f.key, name,
                              FormatList(Scaled(full, 1e3)), FormatList(Scaled(delta, 1e3)));
      }
    }
    // Steady state of the default policy: the measured cost of a save (extra
    // wall time over the paired plain run, per save) over the interval the
    // policy chose after measuring that save itself.
    const auto& def = f.runs.at(Arm::kDefault);
    std::vector<double> cost;
    for (size_t i = 0; i < def.size() && i < plain.size(); ++i) {
      cost.push_back((def[i].wall_s - plain[i].wall_s) / std::max(1, def[i].saves));
    }
    double c = Median(cost);
    // Where C went, against the paired plain run's median step: steps a write
    // overlapped, steps after the writes were done, and blocking + Flush.
    std::vector<double> during, after, rest;
    for (size_t i = 0; i < def.size() && i < plain.size(); ++i) {
      double base = Median(plain[i].step_s);
      double d = 0, a = 0;
      for (size_t k = 0; k < def[i].step_s.size(); ++k) {
        (def[i].busy[k] ? d : a) += def[i].step_s[k] - base;
      }
      double saves = std::max(1, def[i].saves);
      during.push_back(d / saves);
      after.push_back(a / saves);
      rest.push_back((def[i].blocking_s + def[i].flush_s) / saves);
    }
    double saves_per_run = Median(Map(def, [](const RunFigures& r) { return double(r.saves); }));
    double est = Median(Map(def, [](const RunFigures& r) { return r.policy_cost_s; }));
    double interval = Median(Map(def, [](const RunFigures& r) { return r.policy_interval_s; }));
    double share = std::max(0.0, c) / interval;
    s.AddRow({f.title, fmt::format("{:.1f} ms", c * 1e3),
              fmt::format("{:+.1f} ms", Median(during) * 1e3),
              fmt::format("{:+.1f} ms", Median(after) * 1e3),
              fmt::format("{:.1f} ms", Median(rest) * 1e3), fmt::format("{:.1f} ms", est * 1e3),
              fmt::format("{:.1f} s", interval), fmt::format("{:.2f}%", share * 100),
              fmt::format("<= {:g}%", kGoalOverhead * 100),
              c <= 0 ? std::string("n/a: C < 0, run-to-run variation exceeds a save's cost")
              : c * saves_per_run < spread_s
                  ? fmt::format("n/a: C is within the plain runs' spread ({:.1f} s)", spread_s)
                  : Verdict(share <= kGoalOverhead)});
    raw += fmt::format(
        "- {} cost per save (default - plain, paired runs) {} ms; policy "
        "estimates {} ms, intervals {} s\n",
        f.key, FormatList(Scaled(cost, 1e3), 1),
        FormatList(Scaled(Map(def, [](const RunFigures& r) { return r.policy_cost_s; }), 1e3), 1),
        FormatList(Map(def, [](const RunFigures& r) { return r.policy_interval_s; }), 1));
  }
  return fmt::format(
      "### 2. Training-time overhead\n\n"
      "Real training steps (batch {}), {} runs per arm, the arms alternating (order rotated "
      "each round). A run's time (\"run s\", median) covers its steps, the saves' blocking time, "
      "the background writer competing for the {} cores, and at the end the wait for its last "
      "saves to be written (Flush), so each run carries all the work of its saves (this "
      "overstates their cost by whatever part of a write, such as fsync waits, would overlap "
      "later training). steps/s = steps / run s. Checkpointing arms run as trainer.cc does: a "
      "fresh CheckpointStore and AsyncSaver (sub-delta versions, full_every 8, a full version "
      "after a delta that saved under 10%), a save of the "
      "initial "
      "state before the first step (the trainer does this when rollback is on, the default), "
      "then a save whenever IntervalPolicy::IntervalSeconds() (default IntervalOptions: MTBF "
      "1 h, max_overhead 1%, first save after 30 s) or the forced interval has passed; every "
      "step and save is recorded in the policy. \"others\": cores other processes kept busy "
      "during the runs (median); above {:.2f} the figures are noisy. Page faults per step (in "
      "\"All runs\"): minor faults the training thread took during its steps.\n\n{}\n"
      "After the job-start save the default policy saves every T (below; T comes from its "
      "measurement of that first save), so a run shorter than T holds the job-start save only "
      "and its \"(window)\" figure is that one save's cost spread over one short run, not the "
      "overhead at the default interval. That overhead is C / T below: C is measured (extra time "
      "of each "
      "default-policy run over the plain run of the same round, per save; mostly a full version "
      "with cold snapshot buffers, the dearest kind), T is the interval the policy chose at the "
      "end of that run from its own estimate of C (blocking time plus the slowdown of steps run "
      "while the writer was busy). C / T is within the goal when the policy's estimate is not "
      "below the real cost. C is split (medians, so the parts need not add up) into the extra "
      "time of steps a write overlapped (at their start or end), of the steps after the writes "
      "were done, both against the paired plain run's median step, and the blocking and final "
      "Flush time.\n\n{}\nAll runs:\n{}\nBackground writer time per save (encode, "
      "write, fsync, retention; wall time of the writer thread):\n{}",
      o.batch, o.runs, o.threads, o.quiet_cores, t.ToMarkdown(), s.ToMarkdown(), raw, writes);
}

std::string BytesSection(const std::vector<SubjectFigures>& all) {
  Table t({"state", "encoding", "stored MB", "raw / stored", "goal", "result", "records"});
  std::string groups;
  for (const SubjectFigures& f : all) {
    for (size_t i = 0; i < f.bytes.size(); ++i) {
      const BytesRow& b = f.bytes[i];
      groups += fmt::format("- {} {}: {}\n", f.key, b.what, b.by_group);
      double ratio = static_cast<double>(f.payload) / static_cast<double>(b.stored);
      const double goal = b.goal;
      t.AddRow({f.title, b.what, Mb(static_cast<double>(b.stored)), fmt::format("{:.2f}x", ratio),
                goal > 0 ? fmt::format(">= {:.2f}x", goal) : "",
                goal > 0 ? Verdict(ratio >= goal) : "", b.codecs});
    }
    t.AddRow({f.title, "torch::save (model + optimizer files)",
              Mb(static_cast<double>(f.blocking.torch_bytes)),
              fmt::format("{:.2f}x", static_cast<double>(f.payload) /
                                         static_cast<double>(f.blocking.torch_bytes)),
              "", "", ""});
  }
  return fmt::format(
      "### 3. Bytes written per save\n\n"
      "Whole checkpoint files (format v3: header, chunks, index, footer) written by "
      "WriteCheckpointFile into memory at zstd level 1 (the saver's), of the full training "
      "state (parameters, buffers, Adam step/exp_avg/exp_avg_sq, RNG, counters). raw / stored "
      "= the snapshot's payload bytes over the file's bytes. Deltas: the state one Adam step, "
      "and {} steps, after the base snapshot; the last row of each state takes one step "
      "again after the training runs of section 2. The default codecs (planes-zstd, "
      "sub-delta) are judged; shuffle-zstd and xor-delta, the codecs they replaced, are "
      "shown beside them. Each file was decoded again and checked against "
      "the snapshot's checksums (q8: against its reconstruction).\n\n{}\nraw / stored by "
      "record group (\"other\": Adam step counts, RNG, counters):\n{}",
      kLongDeltaSteps, t.ToMarkdown(), groups);
}

std::string CodecSection(const std::vector<SubjectFigures>& all) {
  Table t({"state", "codec", "MB", "raw / stored", "encode MB/s", "decode MB/s", "goal", "result"});
  for (const SubjectFigures& f : all) {
    for (const CodecRow& c : f.codecs) {
      double enc = static_cast<double>(c.raw_bytes) / 1e6 / c.encode_s;
      double dec = static_cast<double>(c.raw_bytes) / 1e6 / c.decode_s;
      // The goal is judged for the codecs the saver uses (the other two are
      // shown for comparison).
      bool judged = f.key == "mlp50m" && c.codec != ckpt::Codec::kShuffleZstd &&
                    c.codec != ckpt::Codec::kXorDelta;
      t.AddRow({f.title, std::string(ckpt::CodecName(c.codec)),
                Mb(static_cast<double>(c.raw_bytes)),
                fmt::format("{:.2f}x",
                            static_cast<double>(c.raw_bytes) / static_cast<double>(c.stored_bytes)),
                fmt::format("{:.0f}", enc), fmt::format("{:.0f}", dec),
                judged ? fmt::format(">= {:.0f}", kGoalCodecMbps) : "",
                judged ? (enc >= kGoalCodecMbps && dec >= kGoalCodecMbps
                              ? "PASS"
                              : fmt::format("MISS ({})",
                                            enc < kGoalCodecMbps && dec < kGoalCodecMbps ? "both"
                                            : enc < kGoalCodecMbps                       ? "encode"
                                                                   : "decode"))
                       : ""});
    }
  }
  return fmt::format(
      "### 4. Codec throughput, one core\n\n"
      "ChunkCodec (zstd level 1) called directly on every {} MiB chunk of every record, "
      "single-threaded; MB of raw record bytes per second of codec calls only (copying the "
      "base into place is untimed). Delta codecs: the state one step after the base. q8-delta: "
      "every f32 record (here also the optimizer's). A record's chunks are all encoded, then "
      "all decoded; every decoded chunk is compared with the original (q8: with the encoder's "
      "reconstruction, and each element with Q8ErrorBound). The goal applies to the 50M "
      "state.\n\n{}",
      ckpt::kChunkBytes >> 20, t.ToMarkdown());
}

std::string RestoreSection(const std::vector<SubjectFigures>& all, const CkptBenchOptions& o) {
  Table t({"state", "restore", "ms", "of which decoding ms", "vs torch::load", "verified"});
  std::string raw, writes;
  for (const SubjectFigures& f : all) {
    const RestoreFigures& r = f.restore;
    double tl = Median(r.torch_s);
    auto row = [&](const std::string& what, const std::vector<double>& v,
                   const std::vector<double>& load, double anchor = 0) {
      if (v.empty()) return;
      double m = Median(v);
      t.AddRow({f.title, what, fmt::format("{:.1f}", m * 1e3),
                load.empty() ? "" : fmt::format("{:.1f}", Median(load) * 1e3),
                fmt::format("{:.2f}x", m / (anchor > 0 ? anchor : tl)), "yes"});
    };
    row("full version (LoadNewestValid + RestoreTrainState)", r.full_s, r.full_load_s);
    row("full version, into the model (LoadNewestValid + TensorPlacement + RestoreTrainState)",
        r.full_placed_s, r.full_placed_load_s);
    row(fmt::format("full version, chunks saving < {:.0f}% stored raw ({} of {}), into the model "
                    "(LoadNewestValid + TensorPlacement + RestoreTrainState)",
                    kRawFullBelowSaving * 100, r.raw_full_raw_chunks, r.raw_full_chunks),
        r.raw_full_placed_s, r.raw_full_placed_load_s);
    row("full version (ReadAll + RestoreTrainState)", r.full_direct_s, r.full_direct_load_s);
    row("full version on one thread (ReadAll(threads 1) + RestoreTrainState)", r.full_serial_s,
        r.full_serial_load_s);
    row(fmt::format("delta at chain depth {} (LoadNewestValid + RestoreTrainState)", r.delta_depth),
        r.delta_s, r.delta_load_s);
    row(fmt::format("delta at chain depth {}, into the model (LoadNewestValid + TensorPlacement + "
                    "RestoreTrainState)",
                    r.delta_depth),
        r.delta_placed_s, r.delta_placed_load_s);
    row(fmt::format("delta at chain depth {}, chain in one pass (ReadChain + RestoreTrainState)",
                    r.delta_depth),
        r.chain_s, r.chain_load_s);
    row("torch::load (model + optimizer)", r.torch_s, {});
    for (bool cold : {false, true}) {
      const std::vector<double>& ours = cold ? r.restart.ours_cold : r.restart.ours;
      const std::vector<double>& torch = cold ? r.restart.torch_cold : r.restart.torch;
      if (torch.empty()) continue;
      const char* cache = cold ? ", page cache dropped" : "";
      row(fmt::format("a restart in a new process{}: full version into the model (Open + "
                      "LoadNewestValid + TensorPlacement + RestoreTrainState)",
                      cache),
          ours, {}, Median(torch));
      row(fmt::format("a restart in a new process{}: torch::load (model + optimizer)", cache),
          torch, {}, Median(torch));
    }
    raw += fmt::format(
        "- {}: full {}, full into the model {}, full stored raw into the model {}, full by "
        "ReadAll {}, full on one thread {}, delta {}, delta into the model {}, delta in one pass "
        "{}, torch::load {}; restarts in a new process: ours {}, torch::load {}, page cache "
        "dropped: ours {}, torch::load {} (ms)\n",
        f.key, FormatList(Scaled(r.full_s, 1e3), 1), FormatList(Scaled(r.full_placed_s, 1e3), 1),
        FormatList(Scaled(r.raw_full_placed_s, 1e3), 1),
        FormatList(Scaled(r.full_direct_s, 1e3), 1), FormatList(Scaled(r.full_serial_s, 1e3), 1),
        FormatList(Scaled(r.delta_s, 1e3), 1), FormatList(Scaled(r.delta_placed_s, 1e3), 1),
        FormatList(Scaled(r.chain_s, 1e3), 1), FormatList(Scaled(r.torch_s, 1e3), 1),
        FormatList(Scaled(r.restart.ours, 1e3), 1), FormatList(Scaled(r.restart.torch, 1e3), 1),
        FormatList(Scaled(r.restart.ours_cold, 1e3), 1),
        FormatList(Scaled(r.restart.torch_cold, 1e3), 1));
    writes += fmt::format(
        "- {}: full version {:.0f} ms, {} MB; deltas {} ms, the newest {} MB; the full version "
        "with chunks saving < {:.0f}% stored raw {} MB\n",
        f.key, r.full_write_s * 1e3, Mb(static_cast<double>(r.full_file_bytes)),
        FormatList(Scaled(r.delta_write_s, 1e3), 0), Mb(static_cast<double>(r.delta_file_bytes)),
        kRawFullBelowSaving * 100, Mb(static_cast<double>(r.raw_full_file_bytes)));
  }
  return fmt::format(
      "### 5. Restore time\n\n"
      "Median of {} reps; before each, parameters and buffers are zeroed and the Adam state "
      "dropped, and after it the state is captured again and compared record by record (by "
      "checksum) with what was saved (torch::load: parameters, buffers and Adam state only; it "
      "holds no RNG or counters). Ours reads and checks the manifest, every chunk and every "
      "decoded record. The versions were written by AsyncSaver (sub-delta versions) one training "
      "step "
      "apart: a full version, then {} deltas; the full one is restored with "
      "LoadNewestValid(before_step = its step + 1), the newest with LoadNewestValid(), which "
      "decodes the whole chain (each chunk's checksum checked, each decoded record's, and each "
      "file's index against the checksum its manifest binds; no whole-file pass); \"into the "
      "model\" rows pass LoadNewestValid a TensorPlacement of the model's parameters and "
      "buffers, so those records decode straight into the tensors (the Adam state's records "
      "become the optimizer's tensors without a copy in every row). Versions are written with "
      "the default plan (planes-zstd, sub-delta; a chunk is stored raw when its codec saves less "
      "than 5%), except the \"stored raw\" row: the same full state saved (Save) with "
      "CodecPlan::raw_below_saving = {:.2f}, its raw chunks read straight into the tensors and "
      "hashed once. The rows through CheckpointFile decode the same files directly (opened "
      "once, untimed): the full one with ReadAll, on every core and on one thread, and the "
      "chain with ReadChain, each chunk through all its versions while in cache. Decoding "
      "runs on one thread per core unless said. torch::load reads files torch::save wrote of the "
      "same state. All files were just written (page cache). The \"restart in a new process\" "
      "rows are what a job pays after a preemption: each rep starts this binary once for ours "
      "and once for torch::load (the order alternating), which builds the model and optimizer "
      "(untimed), then restores (timed: ours opens the store, loads the full version into the "
      "model and restores the train state) and is checked like the rest; in a new process no "
      "memory an earlier restore freed is at hand (the reps above may reuse it: the trainer's "
      "malloc settings keep large blocks in the heap). Their \"vs torch::load\" is against "
      "torch::load in a new process, with the page cache as warm or cold (posix_fadvise "
      "DONTNEED after a sync) as ours. \"vs torch::load\" < 1 means ours is faster.\n\n{}\nAll "
      "reps:\n{}\nWriting them (AsyncSaver's writer thread: "
      "encode, write, fsync, retention):\n{}",
      o.restores, kRestoreChainDepth, kRawFullBelowSaving, t.ToMarkdown(), raw, writes);
}

double Sum(const std::vector<DurableVersion>& v, double DurableVersion::*field) {
  double sum = 0;
  for (const DurableVersion& x : v) sum += x.*field;
  return sum;
}

std::string DurableSection(const std::vector<SubjectFigures>& all, const CkptBenchOptions& o) {
  Table v({"state", "durable_max_chain", "version", "local chain depth", "durable chain depth",
           "durable copy", "local MB", "durable MB", "write ms", "replicate ms"});
  Table t({"state", "durable_max_chain", "restart restores", "chain depth decoded", "ms",
           "of which LoadNewestValid ms", "vs torch::load",
           fmt::format("replicate ms ({} versions)", kRestoreChainDepth + 1), "durable MB written",
           "durable tier MB at restart", "verified"});
  std::string raw, others;
  for (const SubjectFigures& f : all) {
    const DurableFigures& d = f.durable;
    const double tl = Median(d.torch_s), tc = Median(d.torch_cold_s);
    for (const DurableArm& a : d.arms) {
      const std::string chain = DurableChainName(a.max_chain);
      uint64_t written = 0;
      for (const DurableVersion& x : a.versions) {
        written += x.durable_bytes;
        v.AddRow({f.title, chain, fmt::format("{}", x.id), fmt::format("{}", x.local_depth),
                  fmt::format("{}", x.durable_depth), x.materialized ? "in full" : "copied",
                  Mb(static_cast<double>(x.local_bytes)), Mb(static_cast<double>(x.durable_bytes)),
                  fmt::format("{:.0f}", x.write_s * 1e3),
                  fmt::format("{:.0f}", x.replicate_s * 1e3)});
      }
      for (bool cold : {false, true}) {
        const double m = Median(cold ? a.cold_restore_s : a.restore_s);
        t.AddRow({f.title, chain,
                  fmt::format("version {}{}", a.restored_id, cold ? ", page cache dropped" : ""),
                  fmt::format("{}", a.restored_depth), fmt::format("{:.1f}", m * 1e3),
                  fmt::format("{:.1f}", Median(cold ? a.cold_load_s : a.load_s) * 1e3),
                  fmt::format("{:.2f}x", m / (cold ? tc : tl)),
                  fmt::format("{:.0f}", Sum(a.versions, &DurableVersion::replicate_s) * 1e3),
                  Mb(static_cast<double>(written)), Mb(static_cast<double>(a.durable_tier_bytes)),
                  "yes"});
        raw += fmt::format("- {} durable_max_chain {}{}: {} (ms)\n", f.key, chain,
                           cold ? ", page cache dropped" : "",
                           FormatList(Scaled(cold ? a.cold_restore_s : a.restore_s, 1e3), 1));
      }
    }
    t.AddRow({f.title, "", "torch::load (model + optimizer)", "", fmt::format("{:.1f}", tl * 1e3),
              "", "1.00x", "", "", "", "yes"});
    t.AddRow({f.title, "", "torch::load (model + optimizer), page cache dropped", "",
              fmt::format("{:.1f}", tc * 1e3), "", "1.00x", "", "", "", "yes"});
    raw += fmt::format("- {} torch::load: {} (ms)\n", f.key, FormatList(Scaled(d.torch_s, 1e3), 1));
    raw += fmt::format("- {} torch::load, page cache dropped: {} (ms)\n", f.key,
                       FormatList(Scaled(d.torch_cold_s, 1e3), 1));
    // What the durable_max_chain 1 arm's restart decodes (MeasureRestarts' arm).
    auto one = std::find_if(d.arms.begin(), d.arms.end(),
                            [](const DurableArm& a) { return a.max_chain == 1; });
    const int depth = one == d.arms.end() ? 0 : one->restored_depth;
    for (bool cold : {false, true}) {
      const std::vector<double>& ours = cold ? d.restart.ours_cold : d.restart.ours;
      const std::vector<double>& torch = cold ? d.restart.torch_cold : d.restart.torch;
      if (ours.empty() || torch.empty()) continue;
      const std::string cache = cold ? ", page cache dropped" : "";
      t.AddRow({f.title, "1", "the newest version, a restart in a new process" + cache,
                fmt::format("{}", depth), fmt::format("{:.1f}", Median(ours) * 1e3), "",
                fmt::format("{:.2f}x", Median(ours) / Median(torch)), "", "", "", "yes"});
      t.AddRow({f.title, "", "torch::load (model + optimizer), a restart in a new process" + cache,
                "", fmt::format("{:.1f}", Median(torch) * 1e3), "", "1.00x", "", "", "", "yes"});
      raw += fmt::format(
          "- {} restarts in a new process{}: durable_max_chain 1 {}, torch::load {} "
          "(ms)\n",
          f.key, cache, FormatList(Scaled(ours, 1e3), 1), FormatList(Scaled(torch, 1e3), 1));
    }
    others += fmt::format("{}{} {:.2f}", others.empty() ? "" : ", ", f.key, d.other_cores);
  }
  return fmt::format(
      "### 6. Restarting from the durable tier\n\n"
      "A restart after a preemption that left no survivor: the local tier is lost and the "
      "restore reads the durable tier only. Three stores with a durable directory, alike but for "
      "StoreOptions::durable_max_chain (no limit: every durable copy is the local file byte for "
      "byte; 1: what jobs get; 0: every durable copy written in full), save the same states, a "
      "full version and then a delta after each of {} training steps (the states captured once; "
      "before a store saves one, the model is restored to it, untimed). One store after the "
      "other, each with its own AsyncSaver (sub-delta versions, full_every 8, deltas whatever "
      "they save) and each save waited for with Flush() (no deadline) before the next, so no "
      "replication overlaps other work; untimed, the process's free memory goes back to the "
      "system before each store (malloc_trim: every saver starts on fresh pages, as a job's "
      "first save does) and the file system's dirty pages are written out before each save "
      "(sync), so no store pays for another's; one save to a scratch store comes first (the "
      "process's first save after the earlier sections finds its memory slowly). The first table "
      "is each version in "
      "each store: its chain depth in each tier, whether "
      "its durable copy was copied or written in full (decoded from the local tier with its "
      "chain and re-encoded as a full version), both files' sizes, the writer thread's time "
      "(SaveReport::write_s: encode, write, fsync, retention) and the replicator's "
      "(SaveReport::replicate_s: the copy, or the decode, encode, write and checks of a copy in "
      "full, then the durable tier's retention). Then each store is closed, its local tier "
      "directory deleted, and the store opened again on the same durable directory with a new, "
      "empty local one; "
      "\"ms\" is LoadNewestValid of the newest version into the model (a TensorPlacement of its "
      "parameters and buffers) + RestoreTrainState, median of {} reps, the stores' order rotated "
      "each rep. Before each restore the parameters and buffers are zeroed and the Adam state "
      "dropped, and after it the state is compared record by record (by checksum) with the "
      "newest state saved; each restore must come from the durable tier with nothing skipped. "
      "\"chain depth decoded\": deltas the restore decoded on top of a full version (the durable "
      "copy's chain depth). \"durable MB written\": the {} durable copies; \"at restart\": "
      "what the durable tier held after its retention (keep the last 3 and their bases). "
      "torch::load reads files torch::save wrote of the same newest state, after each rep's "
      "restores. All files were just written (page cache warm); then, each rep, the same "
      "restores and torch::load again with their files dropped from the page cache first "
      "(posix_fadvise DONTNEED: the reads go to the disk, as a new machine's do), each against "
      "torch::load's cold reads. Last, the durable_max_chain 1 store (what jobs get) restarted "
      "in a new process each rep, as after a preemption: this binary started once for ours (a "
      "new empty local tier, the same durable one) and once for torch::load, the order "
      "alternating; the child builds the model and optimizer (untimed), then restores (timed: "
      "ours opens the store, loads the newest version into the model and restores the train "
      "state) and is checked like the rest; warm, then with the files dropped. \"vs "
      "torch::load\" < 1 means "
      "ours is faster. Cores other processes used during this section: {}.\n\n{}\nThe "
      "restarts:\n\n{}\nAll reps:\n{}",
      kRestoreChainDepth, o.restores, kRestoreChainDepth + 1, others, v.ToMarkdown(),
      t.ToMarkdown(), raw);
}

}  // namespace

std::string CkptReport(const CkptBenchOptions& o, const std::string& data_source,
                       const std::vector<SubjectFigures>& all, double elapsed_s) {
  std::string others;
  for (const SubjectFigures& f : all) {
    others += fmt::format("{}{} {:.2f}", others.empty() ? "" : ", ", f.key, f.other_cores);
  }
  if (o.restore_only) {
    return fmt::format(
               "## ckpt: restore time and restarts from the durable tier\n\nStates: {}. Each after "
               "{} Adam steps (lr 1e-3, batch "
               "{}) on {}; {} intra-op threads, seed {}. Cores other processes used meanwhile: "
               "{}. The workload took {:.0f} s.\n\n",
               fmt::join(o.states, ", "), o.warmup_steps, o.batch, data_source, o.threads, o.seed,
               others, elapsed_s) +
           RestoreSection(all, o) + "\n" + DurableSection(all, o);
  }
  return fmt::format(
             "## ckpt: checkpointing cost in training\n\n"
             "States: {}. Each after {} Adam steps (lr 1e-3, batch {}) on {}; {} intra-op "
             "threads, seed {}, glibc malloc set as the trainer sets it. Cores other processes "
             "used meanwhile: {}. The workload took {:.0f} s.\n\n",
             fmt::join(o.states, ", "), o.warmup_steps, o.batch, data_source, o.threads, o.seed,
             others, elapsed_s) +
         BlockingSection(all, o) + "\n" + OverheadSection(all, o) + "\n" + BytesSection(all) +
         "\n" + CodecSection(all) + "\n" + RestoreSection(all, o) + "\n" + DurableSection(all, o);
}

}  // namespace spot::bench

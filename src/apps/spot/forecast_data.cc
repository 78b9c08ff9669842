#include "apps/spot/forecast_data.h"

#include <algorithm>
#include <filesystem>

#include "market/loaders.h"
#include "market/synthetic.h"

namespace spot::cli {
namespace {

namespace fs = std::filesystem;

Status BadInput(const std::string& what, const Status& s) {
  return InvalidArgumentError(what + ": " + s.message());
}

// Price files that belong to an availability folder of the shared records
// (same zones, same tick grid, same dates).
struct PriceLink {
  const char* folder;
  const char* csv;
  double tick_seconds;
};
constexpr PriceLink kPriceLinks[] = {
    {"aws-v100-2023-02", "aws_p3.2xlarge_spot_2023-02-15_2023-04-02.csv", 195}};

Status Attach(const std::string& flag, const std::string& path, double tick_s,
              std::vector<market::Trace>& traces) {
  auto table = market::LoadPriceTable(path, tick_s);
  if (!table.ok()) return BadInput(flag + " " + path, table.status());
  for (market::Trace& t : traces) {
    Status s = market::AttachPrices(*table, &t);
    if (!s.ok()) return BadInput(flag + " " + path + ": trace " + t.name, s);
  }
  return Status::Ok();
}

Result<std::vector<market::Trace>> LoadTraces(const std::string& flag,
                                              const std::vector<std::string>& paths) {
  std::vector<market::Trace> traces;
  for (const std::string& path : paths) {
    auto t = market::LoadAvailabilityFile(path);
    if (!t.ok()) return BadInput(flag + " " + path, t.status());
    traces.push_back(std::move(t).value());
  }
  return traces;
}

Result<forecast::Panel> FolderPanel(const fs::path& folder, const fs::path& prices_dir,
                                    int32_t min_count) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(folder)) {
    if (e.path().extension() == ".json") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  SPOT_ASSIGN_OR_RETURN(auto traces, LoadTraces("--all", files));
  for (const PriceLink& link : kPriceLinks) {
    if (folder.filename() != link.folder) continue;
    SPOT_RETURN_IF_ERROR(
        Attach("--all", (prices_dir / link.csv).string(), link.tick_seconds, traces));
  }
  auto p = forecast::PanelFromTraces(folder.filename().string(), traces, min_count);
  if (!p.ok()) return BadInput("--all " + folder.string(), p.status());
  return p;
}

Result<std::vector<forecast::Panel>> AllRecords(const ForecastDataFlags& f) {
  std::vector<forecast::Panel> out;
  const fs::path root(f.all);
  for (const char* kind : {"availability", "preemption"}) {
    std::error_code ec;
    std::vector<fs::path> folders;
    for (const auto& e : fs::directory_iterator(root / kind, ec)) {
      if (e.is_directory()) folders.push_back(e.path());
    }
    if (ec)
      return InvalidArgumentError("--all " + f.all + ": cannot list " + kind +
                                  "/: " + ec.message());
    std::sort(folders.begin(), folders.end());
    for (const fs::path& d : folders) {
      SPOT_ASSIGN_OR_RETURN(auto p, FolderPanel(d, root / "prices", f.min_count));
      out.push_back(std::move(p));
    }
  }
  return out;
}

}  // namespace

Result<std::vector<forecast::Panel>> LoadForecastPanels(const ForecastDataFlags& f) {
  if (!f.all.empty()) {
    if (!f.traces.empty() || !f.prices.empty()) {
      return InvalidArgumentError("--all: cannot be combined with --trace or --prices");
    }
    return AllRecords(f);
  }
  std::vector<market::Trace> traces;
  if (f.traces.empty() && f.prices.empty()) {
    traces = market::DefaultSyntheticZones(int64_t(f.synthetic_days * 86400 / 195), f.seed);
  } else if (f.traces.empty()) {
    double tick = f.tick_seconds > 0 ? f.tick_seconds : 195;
    auto table = market::LoadPriceTable(f.prices, tick);
    if (!table.ok()) return BadInput("--prices " + f.prices, table.status());
    auto p = forecast::PanelFromPriceTable(fs::path(f.prices).stem().string(), *table, tick);
    if (!p.ok()) return BadInput("--prices " + f.prices, p.status());
    return std::vector<forecast::Panel>{std::move(p).value()};
  } else {
    SPOT_ASSIGN_OR_RETURN(traces, LoadTraces("--trace", f.traces));
    if (!f.prices.empty()) {
      double tick = f.tick_seconds > 0 ? f.tick_seconds : traces[0].gap_seconds;
      SPOT_RETURN_IF_ERROR(Attach("--prices", f.prices, tick, traces));
    }
  }
  auto p =
      forecast::PanelFromTraces(f.traces.empty() ? "synthetic" : "traces", traces, f.min_count);
  if (!p.ok()) return BadInput("--trace", p.status());
  return std::vector<forecast::Panel>{std::move(p).value()};
}

}  // namespace spot::cli

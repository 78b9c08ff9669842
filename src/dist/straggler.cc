#include "dist/straggler.h"

#include <algorithm>

namespace spot::dist {

std::vector<int> StragglerWatch::Observe(double now_s, const std::vector<double>& rates) {
  if (slow_since_.size() != rates.size()) {
    slow_since_.assign(rates.size(), -1);
    flagged_.clear();
  }
  // The median of the known throughputs but `skip`s (rates.size(): of all).
  auto median_of_others = [&](size_t skip) {
    std::vector<double> known;
    for (size_t r = 0; r < rates.size(); ++r) {
      if (r != skip && rates[r] > 0) known.push_back(rates[r]);
    }
    if (known.empty()) return 0.0;
    std::sort(known.begin(), known.end());
    const size_t n = known.size();
    return n % 2 ? known[n / 2] : (known[n / 2 - 1] + known[n / 2]) / 2;
  };
  median_ = median_of_others(rates.size());
  std::vector<int> newly;
  for (size_t r = 0; r < rates.size(); ++r) {
    const int rank = static_cast<int>(r);
    const double others = median_of_others(r);
    const bool slow = rates[r] > 0 && others > 0 && rates[r] * opt_.factor < others;
    if (!slow) {
      slow_since_[r] = -1;
      flagged_.erase(rank);
      continue;
    }
    if (slow_since_[r] < 0) slow_since_[r] = now_s;
    if (now_s - slow_since_[r] >= opt_.seconds && flagged_.insert(rank).second) {
      newly.push_back(rank);
    }
  }
  return newly;
}

void StragglerWatch::Reset() {
  slow_since_.clear();
  flagged_.clear();
  median_ = 0;
}

}  // namespace spot::dist

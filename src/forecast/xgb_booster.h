// A thin RAII wrapper over the XGBoost C API (Debian libxgboost-dev): train a
// booster on a dense float matrix, predict one row. Every C API failure comes
// back as a Status with XGBoost's message. Deterministic for a fixed seed and
// thread count (both are always set explicitly).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace spot::forecast {

struct BoosterParams {
  std::string objective = "reg:squarederror";  // or "binary:logistic"
  int rounds = 60;                             // boosting rounds, >= 1
  int max_depth = 4;
  double eta = 0.1;
  double min_child_weight = 1;  // hessian a leaf needs (larger: fewer, safer splits)
  int threads = 1;              // nthread, >= 1
  uint64_t seed = 0;
  double base_score = 0.5;  // the prediction before any tree (a probability for logistic)
};

class Booster {
 public:
  // rows: n x cols, row-major. InvalidArgument for a shape mismatch or no rows.
  static Result<Booster> Train(std::span<const float> rows, int64_t cols,
                               std::span<const float> labels, const BoosterParams& params);
  Booster(Booster&&) noexcept;
  Booster& operator=(Booster&&) noexcept;
  ~Booster();

  // The model's output for one row (a probability for binary:logistic).
  Result<double> Predict(std::span<const float> row) const;

 private:
  explicit Booster(void* handle, int64_t cols) : handle_(handle), cols_(cols) {}
  void* handle_ = nullptr;  // BoosterHandle
  int64_t cols_ = 0;
};

}  // namespace spot::forecast

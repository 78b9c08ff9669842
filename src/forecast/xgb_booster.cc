#include "forecast/xgb_booster.h"

#include <xgboost/c_api.h>

#include <cmath>
#include <utility>

namespace spot::forecast {
namespace {

Status Check(int rc, const char* what) {
  if (rc == 0) return Status::Ok();
  return InternalError(std::string("xgboost ") + what + ": " + XGBGetLastError());
}

// Owns a DMatrixHandle.
struct Matrix {
  DMatrixHandle h = nullptr;
  ~Matrix() {
    if (h) XGDMatrixFree(h);
  }
};

}  // namespace

Booster::Booster(Booster&& o) noexcept
    : handle_(std::exchange(o.handle_, nullptr)), cols_(o.cols_) {}

Booster& Booster::operator=(Booster&& o) noexcept {
  std::swap(handle_, o.handle_);
  cols_ = o.cols_;
  return *this;
}

Booster::~Booster() {
  if (handle_) XGBoosterFree(handle_);
}

Result<Booster> Booster::Train(std::span<const float> rows, int64_t cols,
                               std::span<const float> labels, const BoosterParams& p) {
  if (cols < 1 || labels.empty() || rows.size() != labels.size() * size_t(cols)) {
    return InvalidArgumentError("xgboost: " + std::to_string(rows.size()) + " values for " +
                                std::to_string(labels.size()) + " rows of " + std::to_string(cols) +
                                " features");
  }
  Matrix m;
  SPOT_RETURN_IF_ERROR(
      Check(XGDMatrixCreateFromMat(rows.data(), labels.size(), cols, NAN, &m.h), "DMatrix"));
  SPOT_RETURN_IF_ERROR(
      Check(XGDMatrixSetFloatInfo(m.h, "label", labels.data(), labels.size()), "labels"));
  BoosterHandle b = nullptr;
  SPOT_RETURN_IF_ERROR(Check(XGBoosterCreate(&m.h, 1, &b), "create"));
  Booster booster(b, cols);
  const std::pair<const char*, std::string> params[] = {
      {"objective", p.objective},
      {"max_depth", std::to_string(p.max_depth)},
      {"eta", std::to_string(p.eta)},
      {"nthread", std::to_string(p.threads)},
      {"seed", std::to_string(p.seed)},
      {"tree_method", "hist"},
      {"verbosity", "0"},
      {"subsample", "1"},
      {"base_score", std::to_string(p.base_score)},
      {"min_child_weight", std::to_string(p.min_child_weight)}};
  for (const auto& [k, v] : params) {
    SPOT_RETURN_IF_ERROR(Check(XGBoosterSetParam(b, k, v.c_str()), k));
  }
  for (int i = 0; i < p.rounds; ++i) {
    SPOT_RETURN_IF_ERROR(Check(XGBoosterUpdateOneIter(b, i, m.h), "update"));
  }
  return booster;
}

Result<double> Booster::Predict(std::span<const float> row) const {
  if (int64_t(row.size()) != cols_) {
    return InvalidArgumentError("xgboost: row of " + std::to_string(row.size()) +
                                " features, model has " + std::to_string(cols_));
  }
  Matrix m;
  SPOT_RETURN_IF_ERROR(Check(XGDMatrixCreateFromMat(row.data(), 1, cols_, NAN, &m.h), "DMatrix"));
  bst_ulong len = 0;
  const float* out = nullptr;
  SPOT_RETURN_IF_ERROR(Check(XGBoosterPredict(handle_, m.h, 0, 0, 0, &len, &out), "predict"));
  if (len != 1) return InternalError("xgboost predict: " + std::to_string(len) + " outputs");
  return static_cast<double>(out[0]);
}

}  // namespace spot::forecast

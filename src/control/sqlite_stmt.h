// A thin RAII wrapper over a prepared SQLite statement, and the mapping of
// SQLite's result codes to ours. Internal to control/'s job store.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "core/status.h"

namespace spot::control::internal {

inline StatusCode CodeForSqlite(int rc) {
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_IOERR:
    case SQLITE_FULL:
    case SQLITE_CANTOPEN:
    case SQLITE_PROTOCOL:
    case SQLITE_READONLY:
      return StatusCode::kUnavailable;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return StatusCode::kDataLoss;
    case SQLITE_CONSTRAINT:
      return StatusCode::kFailedPrecondition;
    default:
      return StatusCode::kInternal;
  }
}

// A prepared statement; parameters are bound in order with Bind().
class Stmt {
 public:
  explicit Stmt(sqlite3_stmt* s) : s_(s) {}
  Stmt(Stmt&& o) noexcept : s_(std::exchange(o.s_, nullptr)), next_(o.next_), rc_(o.rc_) {}
  Stmt& operator=(Stmt&&) = delete;
  ~Stmt() { sqlite3_finalize(s_); }

  Stmt& Bind(const std::string& v) {
    return Check(
        sqlite3_bind_text(s_, next_++, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
  }
  Stmt& Bind(double v) { return Check(sqlite3_bind_double(s_, next_++, v)); }
  Stmt& Bind(int64_t v) { return Check(sqlite3_bind_int64(s_, next_++, v)); }
  Stmt& Bind(int v) { return Bind(static_cast<int64_t>(v)); }
  Stmt& Bind(bool v) { return Bind(static_cast<int64_t>(v ? 1 : 0)); }
  Stmt& Bind(const std::optional<double>& v) {
    return v ? Bind(*v) : Check(sqlite3_bind_null(s_, next_++));
  }

  // Makes the statement ready to run again with new parameters.
  void Reset() {
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
    next_ = 1;
    rc_ = SQLITE_OK;
  }

  // SQLITE_ROW, SQLITE_DONE or an error code (a failed Bind included).
  int Step() { return rc_ != SQLITE_OK ? rc_ : sqlite3_step(s_); }

  double Double(int i) const { return sqlite3_column_double(s_, i); }
  int64_t Int(int i) const { return sqlite3_column_int64(s_, i); }
  std::string Text(int i) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s_, i));
    return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(s_, i))) : std::string();
  }
  std::optional<double> OptDouble(int i) const {
    if (sqlite3_column_type(s_, i) == SQLITE_NULL) return std::nullopt;
    return Double(i);
  }

 private:
  Stmt& Check(int rc) {
    if (rc_ == SQLITE_OK) rc_ = rc;
    return *this;
  }
  sqlite3_stmt* s_;
  int next_ = 1;
  int rc_ = SQLITE_OK;
};

}  // namespace spot::control::internal

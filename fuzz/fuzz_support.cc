#include "fuzz_support.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace spot::fuzz {
namespace {

namespace fs = std::filesystem;

std::string* g_dir = nullptr;

void RemoveScratchDir() {
  if (g_dir == nullptr) return;
  std::error_code ec;
  fs::remove_all(*g_dir, ec);
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "fuzz harness: %s\n", what.c_str());
  std::abort();
}

}  // namespace

const std::string& ScratchDir() {
  if (g_dir != nullptr) return *g_dir;
  char tmpl[] = "/tmp/spot-fuzz.XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) Die("cannot create a directory under /tmp");
  g_dir = new std::string(tmpl);
  std::atexit(RemoveScratchDir);
  return *g_dir;
}

std::string WriteScratchFile(std::string_view name, std::string_view bytes) {
  std::string path = ScratchDir() + "/" + std::string(name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) Die("cannot write " + path);
  return path;
}

std::string FreshScratchSubdir(std::string_view sub) {
  fs::path dir = fs::path(ScratchDir()) / sub;
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) Die("cannot create " + dir.string() + ": " + ec.message());
  return dir.string();
}

std::string SafeFileName(std::string_view raw, size_t max_len) {
  std::string name(raw.substr(0, max_len));
  for (char& c : name) {
    if (c == '/' || c == '\0') c = '_';
  }
  if (name.empty() || name == "." || name == "..") name = "input";
  return name;
}

std::pair<std::string_view, std::string_view> SplitFirstLine(std::string_view text) {
  size_t nl = text.find('\n');
  if (nl == std::string_view::npos) return {text, {}};
  return {text.substr(0, nl), text.substr(nl + 1)};
}

void InvariantFailed(const char* file, int line, const char* cond, const std::string& detail) {
  std::fprintf(stderr, "\n==== contract broken at %s:%d: %s\n     %s\n", file, line, cond,
               detail.c_str());
  std::abort();
}

}  // namespace spot::fuzz

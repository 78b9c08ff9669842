// Helpers shared by the fuzz harnesses in this directory.
//
// Harnesses whose parser reads a file write the input to a scratch file first:
// one directory per fuzzing process under /tmp, created on first use, reused
// for every input and removed at exit. Not thread-safe (libFuzzer calls a
// harness from one thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace spot::fuzz {

// The input as a string.
inline std::string AsString(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// This process's scratch directory ("/tmp/spot-fuzz.XXXXXX"), created on the
// first call. Aborts when it cannot be created.
const std::string& ScratchDir();

// Writes `bytes` to ScratchDir()/name (replacing it) and returns the path.
// Aborts when it cannot (a full /tmp is no finding).
std::string WriteScratchFile(std::string_view name, std::string_view bytes);

// Removes everything in ScratchDir()/sub (or in ScratchDir() when empty) and
// recreates it; returns its path.
std::string FreshScratchSubdir(std::string_view sub);

// A file name made from untrusted bytes: at most `max_len` bytes, no '/' or
// NUL, never "", "." or "..".
std::string SafeFileName(std::string_view raw, size_t max_len = 200);

// Splits `text` at the first '\n': the line (without it) and the rest.
std::pair<std::string_view, std::string_view> SplitFirstLine(std::string_view text);

// Reports a broken contract of the code under test and aborts, so libFuzzer
// records the input as a crash. Use through FUZZ_CHECK.
[[noreturn]] void InvariantFailed(const char* file, int line, const char* cond,
                                  const std::string& detail);

}  // namespace spot::fuzz

// Checks a documented contract of the parser's result (not an assert of the
// harness's own logic): on failure prints the condition and `detail`, aborts.
#define FUZZ_CHECK(cond, detail)                                          \
  do {                                                                    \
    if (!(cond)) ::spot::fuzz::InvariantFailed(__FILE__, __LINE__, #cond, (detail)); \
  } while (0)

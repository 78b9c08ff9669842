// An array read from a data file (NumPy, safetensors) before it becomes a
// tensor: its element type, shape and little-endian bytes in C order.
// LibTorch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace spot::train {

struct HostArray {
  std::string dtype;  // NumPy's names: "f4", "f8", "u1", "i1", "i2", "i4", "i8", "u2", "b1"
  std::vector<int64_t> shape;  // () for a scalar
  std::string data;            // little-endian values in C order
  int64_t count() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

// Bytes per element of a dtype above; 0 for any other.
int DTypeBytes(const std::string& dtype);

}  // namespace spot::train

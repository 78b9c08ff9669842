// NumPy arrays as NumPy writes them: `.npy` files (np.save) and `.npz`
// archives of them (np.savez, np.savez_compressed; a zip archive read with
// libzip). Format: numpy.org/doc/stable/reference/generated/numpy.lib.format.html
//   magic "\x93NUMPY", version 1.0 | 2.0 | 3.0, a little-endian header length,
//   then a Python dict literal {'descr': '<f4', 'fortran_order': False,
//   'shape': (n, 28, 28), } padded with spaces, then the data in C order.
// LibTorch-free: the reader hands back bytes and the dtype; train_setup turns
// them into tensors.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "train/host_array.h"

namespace spot::train {

// Parses one .npy file's bytes. InvalidArgument naming `where` and what is
// wrong: no NumPy magic, an unknown version, a header that does not parse,
// Fortran order, a big-endian or unsupported dtype (objects, strings,
// complex), or data shorter or longer than the shape says.
Result<HostArray> ParseNpy(std::string_view bytes, const std::string& where);

// Reads `names` (without ".npy") from the .npz archive at `path`. InvalidArgument
// naming the file and the array: not a zip archive, a missing array (the
// message lists those present), a damaged entry or any ParseNpy error.
Result<std::map<std::string, HostArray>> ReadNpz(const std::string& path,
                                                 const std::vector<std::string>& names);

}  // namespace spot::train

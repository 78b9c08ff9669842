// Arrays of a safetensors file (github.com/huggingface/safetensors, what
// `safetensors.numpy.save_file` and `safetensors.torch.save_file` write): a
// little-endian u64 header length, a JSON header
//   {"x_train": {"dtype": "U8", "shape": [60000, 28, 28], "data_offsets": [0, 47040000]},
//    "__metadata__": {...}}
// then the tensors' bytes. The header is parsed with nlohmann::json.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "train/host_array.h"

namespace spot::train {

// Reads `names` (every tensor when empty) from the safetensors file at `path`. InvalidArgument naming
// the file and the tensor: a header that is not JSON or does not fit the
// file, a missing tensor (the message lists those present), an unsupported
// dtype, offsets outside the data or not matching the shape.
Result<std::map<std::string, HostArray>> ReadSafetensors(const std::string& path,
                                                         const std::vector<std::string>& names);

}  // namespace spot::train

// A picture of a protocol's result (SVG, self-contained): per market and
// pooled, each policy's mean cost relative to `up` (paired per start) with its
// bootstrap 95% interval, and its p95 cost relative to on-demand's mean.
#pragma once

#include <string>

#include "sim/protocol.h"

namespace spot::sim {

std::string RenderProtocolSvg(const ProtocolResult& result, const std::string& title);

}  // namespace spot::sim

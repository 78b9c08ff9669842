#include "sim/svg_timeline.h"

#include <gtest/gtest.h>

#include "policy/registry.h"
#include "policy/test_traces.h"

namespace spot::sim {
namespace {

TEST(SvgTimeline, DrawsEveryPanel) {
  auto t = policy::testing::MakeTrace(3600, {1, 0, 0, 1, 1, 1, 1, 1}, {}, "zone-a");
  JobSpec job{.compute_hours = 3, .deadline_hours = 6, .changeover_hours = 0.5};
  policy::PolicyRegistry reg;
  policy::RegisterBuiltinPolicies(reg);
  auto p = reg.Create("up");
  const market::Trace* zones[] = {&t};
  RunResult r = SimulateJob(**p, zones, 0, job, {.record_timeline = true});
  std::string svg = RenderTimelineSvg(r, zones, 0, job, "up on zone-a");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("zone-a"), std::string::npos);
  EXPECT_NE(svg.find("#1565c0"), std::string::npos);  // on-demand while spot was down
  EXPECT_NE(svg.find("polyline"), std::string::npos);
}

}  // namespace
}  // namespace spot::sim

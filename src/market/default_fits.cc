// Built-in synthetic market fits, so every command runs without ../shared/data.
//
// Each row is FitSyntheticModel (min_count 1) of one zone of
//   ../shared/data/availability/aws-v100-2023-02/<zone>_v100_1.json
//   (p3.2xlarge availability, 195 s ticks, 20158 ticks from 2023-02-15 22:08:16 UTC)
// with prices attached from
//   ../shared/data/prices/aws_p3.2xlarge_spot_2023-02-15_2023-04-02.csv
//   (LoadPriceTable with tick_seconds = 195, then AttachPrices).
// Printed by SyntheticTest.DISABLED_PrintDefaultFits in synthetic_test.cc;
// SyntheticTest.DefaultFitsComeFromTheNamedFiles checks them against the files
// whenever those are present.
#include "market/synthetic.h"

namespace spot::market {
namespace {

constexpr char kSource[] =
    "availability/aws-v100-2023-02/%s_v100_1.json + "
    "prices/aws_p3.2xlarge_spot_2023-02-15_2023-04-02.csv";

SyntheticModel Zone(const std::string& zone, double availability, LogNormalHours up,
                    LogNormalHours down, PriceModel price) {
  SyntheticModel m;
  m.pool = {"aws", zone.substr(0, zone.size() - 1), zone, "p3.2xlarge"};
  m.name = zone + "_v100_1";
  std::string source = kSource;
  m.fitted_from = source.replace(source.find("%s"), 2, zone);
  m.gap_seconds = 195;
  m.capacity = 1;
  m.availability_fraction = availability;
  m.up = up;
  m.down = down;
  m.price = price;
  return m;
}

}  // namespace

std::vector<SyntheticModel> DefaultSyntheticModels() {
  // Zone(name, availability fraction, up {mu, sigma, runs}, down {mu, sigma, runs},
  //      price {known, initial, level, changes/h, reversion, volatility}).
  // Lognormal mu/sigma are of run length in hours. Reversion 0.999 is the
  // clamp: over 45 days these prices drift like a random walk.
  return {
      // KM median lifetime 0.325 h, mean up 0.719 h, mean down 3.547 h.
      Zone("us-east-1a", 0.16668320, {-0.76386446, 0.93218202, 253}, {0.00735100, 1.58667401, 252},
           {true, 1.6703, 1.65142822, 0.16301984, 0.99900000, 0.00777601}),
      // KM median lifetime 0.542 h, mean up 1.665 h, mean down 1.868 h.
      Zone("us-east-1d", 0.44726659, {-0.23934114, 1.22403045, 293}, {-0.17664667, 1.26607359, 293},
           {true, 1.1856, 1.23230365, 0.16576736, 0.99900000, 0.00654430}),
      // KM median lifetime 0.867 h, mean up 5.507 h, mean down 1.809 h.
      Zone("us-east-2a", 0.75930152, {0.31603550, 1.66733142, 145}, {-0.28120873, 1.32217629, 145},
           {true, 0.9180, 0.92978943, 0.05952972, 0.99900000, 0.00683332}),
      // KM median lifetime 1.029 h, mean up 5.762 h, mean down 0.808 h.
      Zone("us-west-2a", 0.88307372, {0.36685901, 1.66398888, 157}, {-0.60522112, 0.88552970, 158},
           {true, 0.9180, 0.94457193, 0.08517328, 0.99900000, 0.00332713}),
      // KM median lifetime 1.408 h, mean up 9.748 h, mean down 1.104 h.
      Zone("us-west-2b", 0.90495089, {0.46491789, 1.90373865, 93}, {-0.45463112, 1.05227537, 94},
           {true, 0.9180, 0.94667804, 0.08150992, 0.99900000, 0.00306121}),
  };
}

}  // namespace spot::market

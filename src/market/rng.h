// A small portable random generator: xoshiro256** seeded by SplitMix64
// (Blackman and Vigna). Its output depends only on the seed, never on the
// standard library, so synthetic markets are identical on every platform
// for a seed (std::*_distribution output differs between libraries).
// Not thread-safe; cheap to copy.
#pragma once

#include <cmath>
#include <cstdint>

namespace spot::market {

class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (uint64_t& s : s_) s = SplitMix64(&seed);
  }

  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

  // Uniform in (0, 1]: never 0, so log() is always finite.
  double Uniform() { return static_cast<double>((Next() >> 11) + 1) * 0x1.0p-53; }

  // Standard normal by Box-Muller (one of the pair; simple and portable).
  double Normal() {
    const double u1 = Uniform(), u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

  bool Bernoulli(double p) { return Uniform() <= p; }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static uint64_t SplitMix64(uint64_t* x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  uint64_t s_[4];
};

}  // namespace spot::market

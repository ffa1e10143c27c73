// Random token ids for the in-process benchmarks (bench-engine, bench-turns): uniform over [0, vocab), from the
// caller's generator, so a fixed seed gives the same prompts on every machine. The engine's cost depends on lengths,
// not on which ids it sees (prompts.h says where that stops being true).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace glint::bench {

std::vector<int32_t> UniformTokenIds(std::mt19937_64& rng, int64_t vocab, int64_t count);

}  // namespace glint::bench

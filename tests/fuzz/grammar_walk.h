// Shared by the grammar fuzzers: a compiled grammar walked for a few tokens over a small byte-level vocabulary,
// where the fast mask (trie walk, cached) must agree with the reference (a token's bytes fed one by one) at every
// step — on every token, or on a sample where the state is large — and every accepted token must keep the matcher
// alive. Aborts (a fuzzer finding) when they disagree.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "grammar/matcher.h"
#include "grammar/synthetic_vocabulary.h"

namespace glint::fuzz {

inline const grammar::TokenVocabulary& SmallVocabulary() {
  static const grammar::TokenVocabulary* vocabulary = [] {
    grammar::SyntheticVocabulary v = grammar::MakeSyntheticVocabulary(600);
    return new grammar::TokenVocabulary(std::move(v.token_bytes), std::move(v.special), std::move(v.end_ids));
  }();
  return *vocabulary;
}

// The reference feeds a token's bytes one by one, so checking one token costs ≈ the state's size (values) × the
// token's bytes; under the fuzzers' sanitizers and comparison hooks a full 600-token check of a 530-value state (35
// parses) took ≈ 1.5 s. A step checks every token while (state values × tokens) stays under this budget, and an
// evenly spaced sample of the tokens (offset by the seed) beyond it, so that every input ends well inside the
// fuzzers' 5-second limit on a loaded machine: a timeout must mean a slow grammar, not a slow check.
inline constexpr int64_t kCheckedValueTokensPerStep = 20000;

// Walks `steps` tokens chosen by `seed` (a few bytes of the input); at every step the fast mask must agree with the
// reference on the checked tokens, and the chosen token (one the fast mask allows) must keep the matcher alive.
inline void WalkAndCheck(const std::shared_ptr<grammar::CompiledGrammar>& compiled, uint32_t seed, int steps) {
  const grammar::TokenVocabulary& vocabulary = SmallVocabulary();
  grammar::Matcher matcher(compiled, &vocabulary);
  grammar::TokenMask fast;
  for (int step = 0; step < steps && !matcher.ended(); ++step) {
    compiled->FillMask(vocabulary, matcher.state(), fast);
    const int64_t work = static_cast<int64_t>(matcher.state().size()) * vocabulary.size();
    const int32_t stride = static_cast<int32_t>(1 + work / kCheckedValueTokensPerStep);
    for (int32_t id = static_cast<int32_t>(seed % static_cast<uint32_t>(stride)); id < vocabulary.size();
         id += stride) {
      if (fast.Test(id) != compiled->AllowsReference(vocabulary, matcher.state(), id)) std::abort();
    }
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < vocabulary.size(); ++id) {
      if (fast.Test(id)) allowed.push_back(id);
    }
    if (allowed.empty()) return;  // a dead end is legal for a grammar the vocabulary cannot spell (engine: error)
    seed = seed * 1103515245u + 12345u;
    if (!matcher.Advance(allowed[(seed >> 8) % allowed.size()])) std::abort();
  }
}

}  // namespace glint::fuzz

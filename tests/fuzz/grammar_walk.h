// Shared by the grammar fuzzers: a compiled grammar walked for a few tokens over a small byte-level vocabulary,
// where the fast mask (trie walk, cached) must equal the reference mask (every token fed byte by byte) at every
// step and every accepted token must keep the matcher alive. Aborts (a fuzzer finding) when they disagree.
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

// Walks `steps` tokens chosen by `seed` (a few bytes of the input), checking masks on the way.
inline void WalkAndCheck(const std::shared_ptr<grammar::CompiledGrammar>& compiled, uint32_t seed, int steps) {
  const grammar::TokenVocabulary& vocabulary = SmallVocabulary();
  grammar::Matcher matcher(compiled, &vocabulary);
  grammar::TokenMask fast, reference;
  for (int step = 0; step < steps && !matcher.ended(); ++step) {
    compiled->FillMask(vocabulary, matcher.state(), fast);
    compiled->FillMaskReference(vocabulary, matcher.state(), reference);
    if (fast.words != reference.words) std::abort();
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < vocabulary.size(); ++id) {
      if (reference.Test(id)) allowed.push_back(id);
    }
    if (allowed.empty()) return;  // a dead end is legal for a grammar the vocabulary cannot spell (engine: error)
    seed = seed * 1103515245u + 12345u;
    if (!matcher.Advance(allowed[(seed >> 8) % allowed.size()])) std::abort();
  }
}

}  // namespace glint::fuzz

// Helpers shared by the engine's tests on real models (engine_test.cc, spec_decode_test.cc): a sink that records
// outputs, the plain-model greedy oracle, exact memory sizing, and the "nothing is held" check.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "grammar/matcher.h"
#include "model/model.h"

namespace glint::testing {

using Tokens = std::vector<int32_t>;

// Records every output of the requests it is the sink of.
class Collector : public RequestSink {
 public:
  void OnOutput(RequestOutput output) override { outputs.push_back(std::move(output)); }
  // Generated tokens / text of sample `index` of `request`, in order.
  Tokens TokensOf(RequestId request, int64_t index = 0) const;
  std::string TextOf(RequestId request, int64_t index = 0) const;
  // The last output of that sample (its finish reason), or null.
  const RequestOutput* Last(RequestId request, int64_t index = 0) const;
  std::vector<RequestOutput> outputs;
};

// Two token sequences of English text in glint-tiny's tokenizer (held-out fortunes of
// tests/data/glint-tiny/tokenizer_cases.json, dealt alternately by length): prompts for the trained model.
std::pair<Tokens, Tokens> GlintTinyTexts();

// The oracle: the model alone, whole prompt then one token at a time, greedy, no speculation. With `matcher`
// (structured output), each argmax is over the tokens the grammar allows, and an end id it chose ends the loop.
Tokens GreedyOracle(const Model& model, const Tokens& prompt, int64_t count, grammar::Matcher* matcher = nullptr);

// A greedy request for `max_tokens` tokens, ignoring end-of-sequence ids.
Request Greedy(const Tokens& prompt, int64_t max_tokens, std::shared_ptr<RequestSink> sink);

// Options with exactly `slots` slots (plus their rollback copies with speculation: `speculative_tokens` each),
// `blocks` blocks of 8 tokens and `checkpoints` checkpoints every 16 tokens (prefix caching off when 0).
EngineOptions SizedOptions(const Model& model, int64_t slots, int64_t blocks, int64_t checkpoints,
                           bool speculative = false, int64_t speculative_tokens = 1);

// An engine core that checks its integrity after every step (null, with a test failure, if it cannot be made).
std::unique_ptr<EngineCore> MakeCore(const Model& model, const EngineOptions& options,
                                     const Tokenizer* tokenizer = nullptr);
// Steps until no work is left (at most 100,000 steps).
void RunToCompletion(EngineCore& core);
// Runs every prompt as a greedy request of `generated` tokens through `core`, all at once or one after the other;
// checks each finished by length and that nothing is held afterwards; returns the generated tokens per prompt.
std::vector<Tokens> RunGreedyPrompts(EngineCore& core, const std::vector<Tokens>& prompts, int64_t generated,
                                     bool one_at_a_time);
// Nothing is held once every request finished: no block has a holder, no slot is taken (cached blocks and
// checkpoints may stay, findable and evictable), nothing runs or waits, and the integrity check passes.
void ExpectPoolsAtStart(const EngineCore& core);

// A model ("glint-tiny" or a golden fixture's name) on one forward path, for value-parameterised engine tests.
struct PathCase {
  std::string model;
  bool fast = false;
};
// Loads the case's model: the fast path on a pool of 2 workers made into `pool`, or the reference.
std::unique_ptr<Model> LoadPathModel(const PathCase& c, std::unique_ptr<WorkerPool>& pool);
// Its GoogleTest parameter name: "tiny_dense_reference", "glint_tiny_fast".
std::string PathCaseName(const ::testing::TestParamInfo<PathCase>& info);

}  // namespace glint::testing

// glint bench-grammar: figures of structured output (not a test; nothing here fails on time).
//   1. Masks: a synthetic 154,880-token byte-level BPE vocabulary (grammar/synthetic_vocabulary.h); for each schema of
//      the suite (tests/data/structured/schemas.json), the compile time, then --sequences walks of up to --steps
//      tokens that share the compiled grammar as concurrent requests do: the time of each step's mask (the
//      per-state cache in front of the trie walk), the cache hit rate, and the uncached trie walk for comparison.
//   2. With --decode: the engine on a model (default the tiny one) at --concurrency sequences, tokens/s without and
//      with a schema constraint, and their ratio.
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "base/file.h"
#include "base/timer.h"
#include "bench/stats.h"
#include "cli/command.h"
#include "cli/engine_flags.h"
#include "cli/model_flags.h"
#include "engine/engine.h"
#include "engine/sampling.h"
#include "grammar/matcher.h"
#include "grammar/synthetic_vocabulary.h"
#include "server/structured_output.h"
#include "tokenizer/tokenizer.h"

namespace glint::cli {
namespace {

using bench::NearestRankPercentile;

using grammar::CompiledGrammar;
using grammar::TokenMask;
using grammar::TokenVocabulary;
using server::Json;

struct GrammarBenchFlags {
  std::string schemas = std::string(GLINT_SOURCE_DIR) + "/tests/data/structured/schemas.json";
  int64_t vocab_size = grammar::kGlmVocabularySize;
  int64_t sequences = 16;
  int64_t steps = 96;
  uint64_t seed = 1;
  bool decode = false;
  std::string decode_schema = "nested";
  ModelFlag model;
  ForwardPathFlags path;
  EngineFlags engine;
  int64_t concurrency = 16;
  int64_t input_len = 32;
  int64_t output_len = 64;
  int64_t requests_factor = 4;
  int64_t repeats = 3;
};

// The next token of a walk: half the time one that closes or separates structure (so walks get past strings and
// through the schema), otherwise any allowed token. Draws from raw mt19937 output (the same on every machine).
int32_t PickToken(const TokenVocabulary& vocabulary, const TokenMask& mask, std::mt19937& random) {
  std::vector<int32_t> allowed, structural;
  for (int32_t id = 0; id < vocabulary.size(); ++id) {
    if (!mask.Test(id)) continue;
    allowed.push_back(id);
    const std::string_view bytes = vocabulary.bytes(id);
    if (vocabulary.is_end(id) || bytes.find_first_of("\",:}]") != std::string_view::npos) structural.push_back(id);
  }
  if (allowed.empty()) return -1;
  const std::vector<int32_t>& from = !structural.empty() && random() % 2 == 0 ? structural : allowed;
  return from[random() % from.size()];
}

struct SchemaFigures {
  double compile_ms = 0;
  int64_t rules = 0;
  std::vector<double> first_us, later_us, walk_us;  // per step: first sequence, later ones, uncached trie walk
  std::vector<double> apply_us;                     // per step: ApplyTokenMask
  CompiledGrammar::CacheStats cache;
  int64_t finished = 0;
};

Result<SchemaFigures> BenchSchema(const Json& schema, const TokenVocabulary& vocabulary, const GrammarBenchFlags& flags,
                                  uint64_t seed) {
  SchemaFigures figures;
  Stopwatch compile_clock;
  grammar::Grammar g;
  server::JsonSchemaCompiler compiler(g);
  GLINT_ASSIGN_OR_RETURN(int32_t root, compiler.AddSchema(schema));
  g.set_root(root);
  GLINT_ASSIGN_OR_RETURN(std::shared_ptr<CompiledGrammar> compiled, CompiledGrammar::Compile(g));
  figures.compile_ms = 1000 * compile_clock.Seconds();
  figures.rules = static_cast<int64_t>(g.rules().size());
  std::mt19937 random(static_cast<uint32_t>(seed));
  TokenMask mask, uncached;
  std::vector<float> logits(static_cast<size_t>(vocabulary.size()), 0.5f);  // [V]
  for (int64_t s = 0; s < flags.sequences; ++s) {
    grammar::Matcher matcher(compiled, &vocabulary);
    for (int64_t step = 0; step < flags.steps && !matcher.ended(); ++step) {
      if (s == 0) {  // what every step would cost without the cache (the first sequence only: it is slow)
        Stopwatch walk_clock;
        compiled->ComputeMask(vocabulary, matcher.state(), uncached);
        figures.walk_us.push_back(1e6 * walk_clock.Seconds());
      }
      Stopwatch clock;
      matcher.FillMask(mask);
      (s == 0 ? figures.first_us : figures.later_us).push_back(1e6 * clock.Seconds());
      Stopwatch apply_clock;  // the sampler's share: the mask applied to [V] logits
      ApplyTokenMask(mask.words, logits);
      figures.apply_us.push_back(1e6 * apply_clock.Seconds());
      const int32_t token = PickToken(vocabulary, mask, random);
      if (token < 0 || !matcher.Advance(token)) return InternalError("the walk reached a dead end at step ", step);
    }
    figures.finished += matcher.ended();
  }
  figures.cache = compiled->cache_stats();
  return figures;
}

Status BenchMasks(const GrammarBenchFlags& flags) {
  GLINT_ASSIGN_OR_RETURN(std::string text, ReadFile(flags.schemas));
  const Json suite = Json::parse(text, nullptr, false);
  if (suite.is_discarded() || !suite.contains("schemas") || !suite["schemas"].is_array()) {
    return InvalidArgument(flags.schemas,
                           " is not a schema suite: expected {\"schemas\": [{\"name\", \"schema\"}...]}");
  }
  Stopwatch vocabulary_clock;
  grammar::SyntheticVocabulary synthetic = grammar::MakeSyntheticVocabulary(flags.vocab_size);
  const TokenVocabulary vocabulary(std::move(synthetic.token_bytes), std::move(synthetic.special), synthetic.end_ids);
  std::printf(
      "vocabulary: %lld tokens (synthetic byte-level BPE), trie of %lld nodes, longest %d bytes, built in "
      "%.0f ms\n",
      static_cast<long long>(vocabulary.size()), static_cast<long long>(vocabulary.trie_nodes()),
      vocabulary.max_depth(), 1000 * vocabulary_clock.Seconds());
  std::printf(
      "masks: %lld sequences per schema sharing its compiled grammar, up to %lld steps each; times per "
      "sequence per step (µs)\n",
      static_cast<long long>(flags.sequences), static_cast<long long>(flags.steps));
  std::printf("%-20s %10s %6s %6s %9s %9s %9s %9s %9s %9s %8s %8s\n", "schema", "compile ms", "rules", "steps",
              "1st p50", "1st p90", "rest p50", "rest p90", "all p50", "all p90", "hit rate", "walk p50");
  std::vector<double> all, apply;
  int64_t hits = 0, misses = 0;
  uint64_t seed = flags.seed;
  for (const Json& entry : suite["schemas"]) {
    GLINT_ASSIGN_OR_RETURN(SchemaFigures f, BenchSchema(entry["schema"], vocabulary, flags, seed++));
    std::vector<double> steps = f.first_us;
    steps.insert(steps.end(), f.later_us.begin(), f.later_us.end());
    all.insert(all.end(), steps.begin(), steps.end());
    apply.insert(apply.end(), f.apply_us.begin(), f.apply_us.end());
    hits += f.cache.hits;
    misses += f.cache.misses;
    const double hit_rate = 100.0 * f.cache.hits / std::max<int64_t>(f.cache.hits + f.cache.misses, 1);
    std::printf("%-20s %10.2f %6lld %6zu %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %7.1f%% %8.0f\n",
                entry.value("name", "?").c_str(), f.compile_ms, static_cast<long long>(f.rules), steps.size(),
                NearestRankPercentile(f.first_us, 0.5), NearestRankPercentile(f.first_us, 0.9),
                NearestRankPercentile(f.later_us, 0.5), NearestRankPercentile(f.later_us, 0.9),
                NearestRankPercentile(steps, 0.5), NearestRankPercentile(steps, 0.9), hit_rate,
                NearestRankPercentile(f.walk_us, 0.5));
    std::fflush(stdout);
  }
  std::printf("all schemas: %zu steps, mask median %.1f µs, p90 %.1f µs, cache hit rate %.1f%%\n", all.size(),
              NearestRankPercentile(all, 0.5), NearestRankPercentile(all, 0.9),
              100.0 * hits / std::max<int64_t>(hits + misses, 1));
  std::printf("ApplyTokenMask of those masks to %lld logits: median %.1f µs, p90 %.1f µs\n",
              static_cast<long long>(vocabulary.size()), NearestRankPercentile(apply, 0.5),
              NearestRankPercentile(apply, 0.9));
  return Status::Ok();
}

struct DecodeFigures {
  double out_rate = 0, decode_rate = 0, tpot_ms = 0;  // generated / wall; concurrency / TPOT p50
  int64_t generated = 0, stopped = 0;
};

// Closed loop as bench-engine runs it: `concurrency` requests in flight, sampled at temperature 1 (seeded), each
// constrained by `grammar` when it is not null (then the grammar may end a request before max_tokens).
Result<DecodeFigures> RunDecode(const Model& model, const Tokenizer& tokenizer, const EngineOptions& options,
                                const std::vector<std::vector<int32_t>>& prompts, const server::GrammarPtr& grammar,
                                const GrammarBenchFlags& flags) {
  GLINT_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Start(model, options, &tokenizer));
  auto queue = std::make_shared<OutputQueue>();
  DecodeFigures figures;
  std::vector<double> tpot;
  size_t next = 0;
  int64_t in_flight = 0;
  const auto submit = [&]() -> Status {
    Request request;
    request.prompt = prompts[next];
    request.sampling.temperature = 1.0f;
    request.sampling.seed = flags.seed + next;
    request.seeded = true;
    request.stop.max_tokens = flags.output_len;
    request.stop.ignore_eos = grammar == nullptr;
    request.grammar = grammar;
    request.sink = queue;
    GLINT_ASSIGN_OR_RETURN(RequestId id, engine->Submit(std::move(request)));
    (void)id;
    ++next;
    ++in_flight;
    return Status::Ok();
  };
  Stopwatch wall;
  while (in_flight < flags.concurrency && next < prompts.size()) GLINT_RETURN_IF_ERROR(submit());
  while (in_flight > 0) {
    RequestOutput out = queue->Pop();
    if (out.finish_reason == FinishReason::kError) return InternalError("a request failed: ", out.error);
    if (!out.request_finished) continue;
    const SequenceTimings& t = *out.timings;
    figures.generated += t.generated_tokens;
    figures.stopped += out.finish_reason == FinishReason::kStop;
    if (t.generated_tokens > 1) tpot.push_back((t.finished - t.first_token) / (t.generated_tokens - 1));
    --in_flight;
    if (next < prompts.size()) GLINT_RETURN_IF_ERROR(submit());
  }
  figures.out_rate = figures.generated / wall.Seconds();
  figures.tpot_ms = 1000 * NearestRankPercentile(tpot, 0.5);
  figures.decode_rate = figures.tpot_ms > 0 ? flags.concurrency / (figures.tpot_ms / 1000) : 0;
  return figures;
}

Status BenchConstrainedDecode(const GrammarBenchFlags& flags) {
  GLINT_ASSIGN_OR_RETURN(std::string text, ReadFile(flags.schemas));
  const Json suite = Json::parse(text, nullptr, false);
  const Json* schema = nullptr;
  for (const Json& entry : suite["schemas"]) {
    if (entry.value("name", "") == flags.decode_schema) schema = &entry["schema"];
  }
  if (schema == nullptr) return InvalidArgument("--decode-schema ", flags.decode_schema, " is not in ", flags.schemas);
  GLINT_ASSIGN_OR_RETURN(EngineOptions options, ToEngineOptions(flags.engine));
  GLINT_ASSIGN_OR_RETURN(std::string dir, ResolveModelDir(flags.model));
  GLINT_ASSIGN_OR_RETURN(LoadedModel loaded, LoadModel({dir}, flags.path));
  GLINT_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::Load(dir));
  server::ConstraintSpec spec;
  spec.kind = server::ConstraintSpec::Kind::kJsonSchema;
  spec.schema = *schema;
  spec.param = "--decode-schema";
  auto grammar = server::CompileConstraint(spec, {});
  if (!grammar.ok()) return InvalidArgument(grammar.error().message);
  const int64_t vocab = loaded.model->config().vocab_size;
  std::printf(
      "\ndecode: %s, concurrency %lld, input %lld random tokens, up to %lld generated at temperature 1, "
      "%lld requests, median of %lld runs; constraint: schema '%s' (ends requests when complete)\n",
      loaded.description.c_str(), static_cast<long long>(flags.concurrency), static_cast<long long>(flags.input_len),
      static_cast<long long>(flags.output_len), static_cast<long long>(flags.requests_factor) * flags.concurrency,
      static_cast<long long>(flags.repeats), flags.decode_schema.c_str());
  std::printf("%-14s %10s %10s %14s %10s %8s\n", "", "out tok/s", "TPOT p50", "decode tok/s", "generated", "stopped");
  double rates[2][2] = {};  // [unconstrained, constrained][out, decode]
  for (int constrained = 0; constrained < 2; ++constrained) {
    std::vector<double> out, decode, tpot, generated, stopped;
    for (int64_t r = 0; r < flags.repeats; ++r) {
      std::mt19937 random(static_cast<uint32_t>(flags.seed + 100 * r));
      std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(flags.requests_factor * flags.concurrency));
      for (auto& prompt : prompts) {
        for (int64_t i = 0; i < flags.input_len; ++i) prompt.push_back(static_cast<int32_t>(random() % vocab));
      }
      GLINT_ASSIGN_OR_RETURN(DecodeFigures f, RunDecode(*loaded.model, tokenizer, options, prompts,
                                                        constrained ? grammar.value() : nullptr, flags));
      out.push_back(f.out_rate);
      decode.push_back(f.decode_rate);
      tpot.push_back(f.tpot_ms);
      generated.push_back(static_cast<double>(f.generated));
      stopped.push_back(static_cast<double>(f.stopped));
    }
    rates[constrained][0] = NearestRankPercentile(out, 0.5);
    rates[constrained][1] = NearestRankPercentile(decode, 0.5);
    std::printf("%-14s %10.1f %8.2fms %14.1f %10.0f %8.0f\n", constrained ? "constrained" : "unconstrained",
                rates[constrained][0], NearestRankPercentile(tpot, 0.5), rates[constrained][1],
                NearestRankPercentile(generated, 0.5), NearestRankPercentile(stopped, 0.5));
    std::fflush(stdout);
  }
  std::printf("constrained / unconstrained: decode tok/s %.3f, out tok/s %.3f (grammar cache: %lld compiled)\n",
              rates[1][1] / std::max(rates[0][1], 1e-9), rates[1][0] / std::max(rates[0][0], 1e-9),
              static_cast<long long>(server::GrammarCacheSnapshot().entries));
  return Status::Ok();
}

GLINT_REGISTER_COMMAND(
    "bench-grammar",
    "Structured-output figures: mask time per step on a 154,880-token vocabulary, compile time, cache hit rate; "
    "with --decode, tokens/s with and without a schema",
    62, [](CLI::App& command) {
      auto flags = std::make_shared<GrammarBenchFlags>();
      command.add_option("--schemas", flags->schemas, "schema suite: {\"schemas\": [{\"name\", \"schema\"}...]}")
          ->capture_default_str();
      command.add_option("--vocab-size", flags->vocab_size, "tokens of the synthetic vocabulary")
          ->capture_default_str();
      command.add_option("--sequences", flags->sequences, "walks per schema (concurrent requests sharing a grammar)")
          ->capture_default_str();
      command.add_option("--steps", flags->steps, "tokens per walk at most")->capture_default_str();
      command.add_option("--seed", flags->seed, "seed of the walks and prompts")->capture_default_str();
      command.add_flag("--decode", flags->decode, "also measure engine decode tokens/s without and with a schema");
      command.add_option("--decode-schema", flags->decode_schema, "--decode: the suite schema to constrain with")
          ->capture_default_str();
      AddModelFlag(command, flags->model);
      AddForwardPathFlags(command, flags->path);
      AddEngineFlags(command, flags->engine);
      command.add_option("--concurrency", flags->concurrency, "--decode: requests in flight")->capture_default_str();
      command.add_option("--input-len", flags->input_len, "--decode: prompt tokens (random ids)")
          ->capture_default_str();
      command.add_option("--output-len", flags->output_len, "--decode: max tokens per request")->capture_default_str();
      command.add_option("--requests-factor", flags->requests_factor, "--decode: requests = factor × concurrency")
          ->capture_default_str();
      command.add_option("--repeats", flags->repeats, "--decode: runs per point (the median is printed)")
          ->capture_default_str();
      return [flags]() -> Status {
        if (flags->sequences < 1 || flags->steps < 1 || flags->vocab_size < 512) {
          return InvalidArgument("--sequences and --steps must be at least 1 and --vocab-size at least 512");
        }
        GLINT_RETURN_IF_ERROR(BenchMasks(*flags));
        return flags->decode ? BenchConstrainedDecode(*flags) : Status::Ok();
      };
    });

}  // namespace
}  // namespace glint::cli

// glint run: tokenize a prompt (or take token ids), prefill, decode, and print the text as it is generated,
// with a line of timing figures at the end. Runs the int8/bf16 fast path by default, the fp32 reference with
// --path reference (FP8 weights dequantized in memory: for tiny and truncated models and for checking).
#include <cstdio>
#include <algorithm>
#include <optional>

#include "base/log.h"
#include "base/timer.h"
#include "cli/command.h"
#include "cli/model_flags.h"
#include "engine/sampling.h"
#include "io/token_file.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace glint::cli {
namespace {

struct RunFlags {
  ModelFlag model;
  ForwardPathFlags path;
  std::string prompt;
  std::string tokens;
  int64_t max_tokens = 64;
  std::optional<float> temperature;
  std::optional<float> top_p;
  int64_t top_k = 0;
  uint64_t seed = 0;
  bool ignore_eos = false;
  bool print_ids = false;
};

Status RunGenerate(const RunFlags& flags) {
  if (flags.prompt.empty() == flags.tokens.empty()) {
    return InvalidArgument("give exactly one of --prompt TEXT or --tokens IDS");
  }
  if (flags.max_tokens < 0) return InvalidArgument("--max-tokens must be >= 0, got ", flags.max_tokens);
  GLINT_ASSIGN_OR_RETURN(std::string dir, ResolveModelDir(flags.model));
  GLINT_ASSIGN_OR_RETURN(LoadedModel forward, LoadModel({dir}, flags.path));
  const Model* model = forward.model.get();
  const ModelConfig& c = model->config();
  GLINT_ASSIGN_OR_RETURN(GenerationConfig generation, LoadGenerationConfig(dir, c));

  // A tokenizer is needed for --prompt and for printing text; with --tokens on a checkpoint without one
  // (e.g. the golden fixtures) the ids are printed instead.
  std::optional<Tokenizer> tokenizer;
  auto loaded = Tokenizer::Load(dir);
  if (loaded.ok()) {
    tokenizer.emplace(std::move(loaded).value());
  } else if (!flags.prompt.empty()) {
    return loaded.status().WithContext("--prompt needs the checkpoint's tokenizer.json");
  }
  std::vector<int32_t> prompt;
  if (!flags.prompt.empty()) {
    GLINT_ASSIGN_OR_RETURN(prompt, tokenizer->Encode(flags.prompt));
    if (prompt.empty()) return InvalidArgument("the prompt encodes to no tokens");
  } else {
    GLINT_ASSIGN_OR_RETURN(prompt, ParseTokenList(flags.tokens, c.vocab_size));
  }
  SamplingParams params;
  params.temperature = flags.temperature.value_or(generation.do_sample ? generation.temperature : 0.0f);
  params.top_p = flags.top_p.value_or(generation.top_p);
  params.top_k = flags.top_k;
  params.seed = flags.seed;
  GLINT_RETURN_IF_ERROR(ValidateSamplingParams(params));
  Sampler sampler(params);
  const bool text_output = tokenizer.has_value() && !flags.print_ids;

  SequenceState state = model->NewSequence();
  std::vector<EntryOutput> outputs;
  Stopwatch prefill_watch;
  BatchEntry entry{prompt, &state, LogitsWanted::kLast, false};
  GLINT_RETURN_IF_ERROR(model->Forward({&entry, 1}, outputs));
  const double prefill_seconds = prefill_watch.Seconds();

  Stopwatch decode_watch;
  std::optional<StreamingDecoder> decoder;
  if (text_output) decoder.emplace(*tokenizer);
  int64_t generated = 0;
  std::string finish = "length";
  while (generated < flags.max_tokens) {
    const int32_t token = sampler.Sample(outputs[0].logits);
    ++generated;
    const bool is_eos =
        std::find(generation.eos_token_ids.begin(), generation.eos_token_ids.end(), token) != generation.eos_token_ids.end();
    if (is_eos && !flags.ignore_eos) {
      finish = "stop";
      break;
    }
    if (text_output) {
      std::fputs(decoder->Push(token).c_str(), stdout);
    } else {
      std::printf("%d ", token);
    }
    std::fflush(stdout);
    if (generated == flags.max_tokens) break;
    entry.tokens = std::span<const int32_t>(&token, 1);
    GLINT_RETURN_IF_ERROR(model->Forward({&entry, 1}, outputs));
  }
  if (decoder) std::fputs(decoder->Flush().c_str(), stdout);
  std::printf("\n");
  const double decode_seconds = decode_watch.Seconds();
  std::fprintf(stderr,
               "glint run: prompt %zu tokens in %.3f s (%.1f tokens/s); generated %lld tokens in %.3f s "
               "(%.1f tokens/s); finish: %s; %s\n",
               prompt.size(), prefill_seconds, prompt.size() / std::max(prefill_seconds, 1e-9),
               static_cast<long long>(generated), decode_seconds, generated / std::max(decode_seconds, 1e-9),
               finish.c_str(), forward.description.c_str());
  return Status::Ok();
}

GLINT_REGISTER_COMMAND(
    "run", "Generate text from a prompt (one sequence, no server)", 20,
    [](CLI::App& command) {
      auto flags = std::make_shared<RunFlags>();
      AddModelFlag(command, flags->model);
      AddForwardPathFlags(command, flags->path);
      command.add_option("--prompt", flags->prompt, "prompt text (encoded with the checkpoint's tokenizer.json)");
      command.add_option("--tokens", flags->tokens, "prompt as token ids, e.g. 1,2,3 (no tokenizer needed)");
      command.add_option("--max-tokens", flags->max_tokens, "tokens to generate at most")->capture_default_str();
      command.add_option("--temperature", flags->temperature, "0 = greedy (default: generation_config.json)")
          ->check(CLI::NonNegativeNumber);
      command.add_option("--top-p", flags->top_p, "nucleus mass in (0, 1] (default: generation_config.json)");
      command.add_option("--top-k", flags->top_k, "keep the k most likely tokens (0 = off)")->capture_default_str();
      command.add_option("--seed", flags->seed, "sampling seed")->capture_default_str();
      command.add_flag("--ignore-eos", flags->ignore_eos, "keep generating past end-of-sequence tokens");
      command.add_flag("--print-ids", flags->print_ids, "print token ids instead of text");
      command.footer(
          "--path reference dequantizes FP8 weights to fp32 in memory: fine for tiny models, far too large for "
          "the full 321B model.");
      return [flags] { return RunGenerate(*flags); };
    });

}  // namespace
}  // namespace glint::cli

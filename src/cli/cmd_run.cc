// glint run: tokenize a prompt (or take token ids), prefill, decode, and print the text as it is generated,
// with a line of timing figures at the end. Runs the int8/bf16 fast path by default, the fp32 reference with
// --path reference (FP8 weights dequantized in memory: for tiny and truncated models and for checking).
#include <algorithm>
#include <cstdio>
#include <optional>

#include "base/file.h"
#include "base/log.h"
#include "base/timer.h"
#include "cli/command.h"
#include "cli/distributed.h"
#include "cli/image_files.h"
#include "cli/model_flags.h"
#include "engine/engine_core.h"
#include "engine/sampling.h"
#include "io/token_file.h"
#include "media/image.h"
#include "media/preprocess.h"
#include "model/model.h"
#include "tokenizer/image_tokens.h"
#include "tokenizer/tokenizer.h"
#include "vision/image_encoder.h"

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
  std::string speculative = "none";
  int64_t speculative_tokens = 1;       // --speculative-tokens K
  std::string kv_cache_dtype = "fp32";  // --kv-cache-dtype; not fp32: the run goes through the engine
  std::vector<std::string> images;      // --image FILE, repeatable
  media::DecodeLimits image_limits;
};

// The images before the prompt text, as the chat template writes an image part: <|begin_of_image|>, N image
// tokens, <|end_of_image|> per image. Returns where each image's tokens are.
// The token ids are config.json's (image_token_id, image_start/end_token_id), the tokenizer's where it names none.
Result<std::vector<RequestImage>> PrependImages(const Tokenizer& tokenizer, const ImageTokenIds& ids,
                                                const VisionConfig& vision,
                                                const std::vector<std::shared_ptr<const VisionInput>>& images,
                                                std::vector<int32_t>& prompt) {
  auto resolved = ResolveImageTokens(ids.image, ids.start, ids.end, &tokenizer);
  if (!resolved.ok()) return resolved.status().WithContext("--image");
  if (!resolved->has_markers()) {
    return FailedPrecondition(
        "--image needs the image markers: config.json's image_start_token_id and "
        "image_end_token_id, or the tokenizer's <|begin_of_image|> and <|end_of_image|>");
  }
  std::vector<int32_t> tokens;
  std::vector<RequestImage> out;
  for (const std::shared_ptr<const VisionInput>& input : images) {
    tokens.push_back(resolved->start);
    out.push_back({static_cast<int64_t>(tokens.size()), input, 0});
    tokens.insert(tokens.end(), VisionTokenCount(vision, *input), resolved->image);
    tokens.push_back(resolved->end);
  }
  prompt.insert(prompt.begin(), tokens.begin(), tokens.end());
  return out;
}

// --image: the files' patches, checked before the model loads.
Result<std::vector<std::shared_ptr<const VisionInput>>> CheckRunImages(const RunFlags& flags, const std::string& dir) {
  if (!flags.images.empty() && flags.prompt.empty()) {
    return InvalidArgument("--image needs --prompt (the images come before the prompt text)");
  }
  // Several ranks: rank 0 runs the tower and the batch plans carry the image rows; the others read no image.
  if (Distributed() && World().rank() != 0) return std::vector<std::shared_ptr<const VisionInput>>{};
  return LoadImageFiles(flags.images, dir, flags.image_limits);
}

// The tower of the run's forward path, the images placed before the prompt, and the positions their rows replace.
struct RunImages {
  std::unique_ptr<ImageEncoder> tower;
  std::vector<RequestImage> requests;
  std::vector<int32_t> positions;
};
Result<RunImages> PrepareRunImages(const RunFlags& flags, const std::string& dir, const LoadedModel& forward,
                                   const Tokenizer& tokenizer,
                                   const std::vector<std::shared_ptr<const VisionInput>>& inputs,
                                   std::vector<int32_t>& prompt) {
  RunImages out;
  auto tower = LoadImageEncoder(dir, forward.model->config(), flags.path.path == "reference", forward.pool.get());
  if (!tower.ok()) return tower.status().WithContext("--image needs the model's vision tower");
  out.tower = std::move(tower).value();
  GLINT_ASSIGN_OR_RETURN(out.requests, PrependImages(tokenizer, forward.model->config().image_tokens,
                                                     out.tower->config(), inputs, prompt));
  for (const RequestImage& image : out.requests) {
    for (int64_t j = 0; j < VisionTokenCount(out.tower->config(), *image.input); ++j) {
      out.positions.push_back(static_cast<int32_t>(image.start + j));
    }
  }
  return out;
}

// Prints each output of the one request as it arrives (EngineCore runs on this thread).
class PrintingSink final : public RequestSink {
 public:
  explicit PrintingSink(bool text) : text_(text) {}
  void OnOutput(RequestOutput output) override {
    if (text_) {
      std::fputs(output.text.c_str(), stdout);
    } else if (output.finish_reason != FinishReason::kStop) {  // an end id ends the output unprinted, as below
      for (int32_t token : output.tokens) std::printf("%d ", token);
    }
    std::fflush(stdout);
    if (output.finish_reason != FinishReason::kNone) last = std::move(output);
  }
  std::optional<RequestOutput> last;

 private:
  bool text_;
};

// The same generation through the engine (one sequence), for what only the engine's cache layout has:
// --speculative mtp, which verifies the MTP layer's drafts (docs/engine.md "Speculative decoding"; greedy output
// is the same as without it), and a compact --kv-cache-dtype (docs/long-context.md "Compact caches"). The cache
// memory is sized for prompt + --max-tokens (at least the engine's default 1 GiB).
Result<EngineOptions> RunEngineOptions(const RunFlags& flags, const Model& model, int64_t tokens) {
  EngineOptions options;
  options.speculative = flags.speculative == "mtp" ? SpeculativeMethod::kMtp : SpeculativeMethod::kNone;
  options.speculative_tokens = flags.speculative_tokens;
  GLINT_ASSIGN_OR_RETURN(options.kv_cache_dtype, ParseKvCacheDtype(flags.kv_cache_dtype));
  CacheOptions cache;
  cache.block_tokens = options.block_tokens;
  cache.mtp = options.speculative == SpeculativeMethod::kMtp;
  cache.kv_dtype = options.kv_cache_dtype;
  GLINT_ASSIGN_OR_RETURN(const CacheLayout layout, model.CacheLayoutFor(cache));
  // Blocks for every position and the drafts past it, the slot and its rollback copies (speculation), and 1/8 for
  // the plan's rounding.
  const int64_t blocks = (tokens + options.speculative_tokens + options.block_tokens) / options.block_tokens;
  const int64_t needed = blocks * layout.block_bytes + (1 + options.speculative_tokens) * layout.slot_bytes;
  options.memory_bytes = std::max(options.memory_bytes, needed + needed / 8 + (int64_t{1} << 20));
  return options;
}

Status RunWithEngine(const RunFlags& flags, const Model& model, const std::optional<Tokenizer>& tokenizer,
                     const GenerationConfig& generation, std::vector<int32_t> prompt, const SamplingParams& params,
                     const std::string& description, ImageEncoder* tower, std::vector<RequestImage> images) {
  GLINT_ASSIGN_OR_RETURN(EngineOptions options,
                         RunEngineOptions(flags, model, static_cast<int64_t>(prompt.size()) + flags.max_tokens));
  options.max_seqs = 1;
  options.prefix_caching = false;  // one request: nothing to share, and chunks need not split at checkpoints
  options.end_token_ids = std::vector<int32_t>(generation.eos_token_ids.begin(), generation.eos_token_ids.end());
  GLINT_ASSIGN_OR_RETURN(std::unique_ptr<EngineCore> core,
                         EngineCore::Create(model, options, tokenizer ? &*tokenizer : nullptr, tower));
  const bool text_output = tokenizer.has_value() && !flags.print_ids;
  auto sink = std::make_shared<PrintingSink>(text_output);
  Request request;
  const int64_t prompt_tokens = static_cast<int64_t>(prompt.size());
  request.prompt = std::move(prompt);
  request.images = std::move(images);
  request.sampling = params;
  request.seeded = true;
  request.stop.max_tokens = flags.max_tokens;
  request.stop.ignore_eos = flags.ignore_eos;
  request.stop.skip_special_tokens = false;  // as the plain loop prints them
  request.sink = sink;
  GLINT_RETURN_IF_ERROR(core->Add(1, std::move(request)));
  while (core->HasWork()) GLINT_RETURN_IF_ERROR(core->Step());
  std::printf("\n");
  if (!sink->last || !sink->last->timings) return InternalError("the engine finished without a last output");
  if (sink->last->finish_reason == FinishReason::kError) return InternalError(sink->last->error);
  const SequenceTimings& t = *sink->last->timings;
  const double prefill_seconds = t.first_token - t.first_scheduled, decode_seconds = t.finished - t.first_token;
  const EngineMetrics m = core->Metrics();
  std::fprintf(stderr,
               "glint run: prompt %lld tokens in %.3f s (%.1f tokens/s); generated %lld tokens in %.3f s after the "
               "first (%.1f tokens/s); finish: %s; %s; kv cache %s; speculative decoding: %s\n",
               static_cast<long long>(prompt_tokens), prefill_seconds, prompt_tokens / std::max(prefill_seconds, 1e-9),
               static_cast<long long>(t.generated_tokens), decode_seconds,
               (t.generated_tokens - 1) / std::max(decode_seconds, 1e-9),
               std::string(FinishReasonName(sink->last->finish_reason)).c_str(), description.c_str(),
               std::string(KvCacheDtypeName(options.kv_cache_dtype)).c_str(), DescribeSpeculation(m).c_str());
  return Status::Ok();
}

// The plain loop (no engine): prefill the prompt, then sample and decode one token at a time.
Status RunPlainLoop(const RunFlags& flags, const Model& model, const std::optional<Tokenizer>& tokenizer,
                    const GenerationConfig& generation, const std::vector<int32_t>& prompt,
                    const SamplingParams& params, const std::string& description, const RunImages& images,
                    const std::vector<std::shared_ptr<const VisionInput>>& image_inputs) {
  Sampler sampler(params);
  const bool text_output = tokenizer.has_value() && !flags.print_ids;
  SequenceState state = model.NewSequence();
  std::vector<EntryOutput> outputs;
  Stopwatch prefill_watch;        // the tower's time included: it is part of the time to the first token
  std::vector<float> image_rows;  // [images.positions, D]
  if (images.tower) {
    GLINT_ASSIGN_OR_RETURN(image_rows, EncodeImages(*images.tower, image_inputs));
  }
  BatchEntry entry{prompt, &state, LogitsWanted::kLast, false};
  entry.embedding_positions = images.positions;
  entry.embedding_rows = image_rows;
  GLINT_RETURN_IF_ERROR(model.Forward({&entry, 1}, outputs));
  entry.embedding_positions = {};
  entry.embedding_rows = {};
  const double prefill_seconds = prefill_watch.Seconds();

  Stopwatch decode_watch;
  std::optional<StreamingDecoder> decoder;
  if (text_output) decoder.emplace(*tokenizer);
  int64_t generated = 0;
  std::string finish = "length";
  while (generated < flags.max_tokens) {
    const int32_t token = sampler.Sample(outputs[0].logits);
    ++generated;
    const bool is_eos = std::find(generation.eos_token_ids.begin(), generation.eos_token_ids.end(), token) !=
                        generation.eos_token_ids.end();
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
    GLINT_RETURN_IF_ERROR(model.Forward({&entry, 1}, outputs));
  }
  if (decoder) std::fputs(decoder->Flush().c_str(), stdout);
  std::printf("\n");
  const double decode_seconds = decode_watch.Seconds();
  std::fprintf(stderr,
               "glint run: prompt %zu tokens in %.3f s (%.1f tokens/s); generated %lld tokens in %.3f s "
               "(%.1f tokens/s); finish: %s; %s\n",
               prompt.size(), prefill_seconds, prompt.size() / std::max(prefill_seconds, 1e-9),
               static_cast<long long>(generated), decode_seconds, generated / std::max(decode_seconds, 1e-9),
               finish.c_str(), description.c_str());
  return Status::Ok();
}

Status RunGenerate(const RunFlags& flags) {
  if (flags.prompt.empty() == flags.tokens.empty()) {
    return InvalidArgument("give exactly one of --prompt TEXT or --tokens IDS");
  }
  if (flags.max_tokens < 0) return InvalidArgument("--max-tokens must be >= 0, got ", flags.max_tokens);
  if (flags.speculative != "none" && flags.speculative != "mtp") {
    return InvalidArgument("--speculative is '", flags.speculative, "'; expected none or mtp");
  }
  if (flags.speculative_tokens < 1 || flags.speculative_tokens > kMaxSpeculativeTokens) {
    return InvalidArgument("--speculative-tokens must be in 1 .. ", kMaxSpeculativeTokens, ", got ",
                           flags.speculative_tokens);
  }
  if (flags.speculative_tokens > 1 && flags.speculative != "mtp") {
    return InvalidArgument("--speculative-tokens ", flags.speculative_tokens, " needs --speculative mtp");
  }
  GLINT_ASSIGN_OR_RETURN(std::string dir, ResolveModelDir(flags.model));
  GLINT_ASSIGN_OR_RETURN(const auto image_inputs, CheckRunImages(flags, dir));
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
  RunImages images;
  if (!image_inputs.empty()) {
    GLINT_ASSIGN_OR_RETURN(images, PrepareRunImages(flags, dir, forward, *tokenizer, image_inputs, prompt));
  }
  // Refused before any work, as the engine and the server count it: prompt + generated ≤ the model's context
  // (compared as max_tokens > limit − prompt: the sum could overflow).
  const int64_t limit = c.max_position_embeddings, prompt_tokens = static_cast<int64_t>(prompt.size());
  if (prompt_tokens > limit || flags.max_tokens > limit - prompt_tokens) {
    return OutOfRange("the prompt (", prompt_tokens, " tokens) plus --max-tokens (", flags.max_tokens,
                      ") is more than the model's context of ", limit, " tokens (max_position_embeddings)");
  }
  SamplingParams params;
  params.temperature = flags.temperature.value_or(generation.do_sample ? generation.temperature : 0.0f);
  params.top_p = flags.top_p.value_or(generation.top_p);
  params.top_k = flags.top_k;
  params.seed = flags.seed;
  GLINT_RETURN_IF_ERROR(ValidateSamplingParams(params));
  if ((flags.speculative == "mtp" || flags.kv_cache_dtype != "fp32") && flags.max_tokens > 0) {
    return RunWithEngine(flags, *model, tokenizer, generation, std::move(prompt), params, forward.description,
                         images.tower.get(), std::move(images.requests));
  }
  return RunPlainLoop(flags, *model, tokenizer, generation, prompt, params, forward.description, images, image_inputs);
}

GLINT_REGISTER_COMMAND("run", "Generate text from a prompt (one sequence, no server)", 20, [](CLI::App& command) {
  auto flags = std::make_shared<RunFlags>();
  AddModelFlag(command, flags->model);
  AddForwardPathFlags(command, flags->path);
  command.add_option("--prompt", flags->prompt, "prompt text (encoded with the checkpoint's tokenizer.json)");
  command.add_option("--tokens", flags->tokens, "prompt as token ids, e.g. 1,2,3 (no tokenizer needed)");
  command.add_option("--image", flags->images,
                     "an image file (PNG, JPEG, WebP, GIF) placed before the prompt text; repeatable. Needs a "
                     "model with a vision tower (docs/vision.md)");
  command.add_option("--max-image-bytes", flags->image_limits.max_bytes, "largest image file")->capture_default_str();
  command.add_option("--max-image-pixels", flags->image_limits.max_pixels, "largest decoded image, w x h")
      ->capture_default_str();
  command.add_option("--max-tokens", flags->max_tokens, "tokens to generate at most")->capture_default_str();
  command.add_option("--temperature", flags->temperature, "0 = greedy (default: generation_config.json)")
      ->check(CLI::NonNegativeNumber);
  command.add_option("--top-p", flags->top_p, "nucleus mass in (0, 1] (default: generation_config.json)");
  command.add_option("--top-k", flags->top_k, "keep the k most likely tokens (0 = off)")->capture_default_str();
  command.add_option("--seed", flags->seed, "sampling seed")->capture_default_str();
  command.add_flag("--ignore-eos", flags->ignore_eos, "keep generating past end-of-sequence tokens");
  command.add_flag("--print-ids", flags->print_ids, "print token ids instead of text");
  command
      .add_option("--speculative", flags->speculative,
                  "speculative decoding: none, or mtp (through the engine: the MTP layer drafts tokens and the "
                  "model verifies them; outputs are unchanged)")
      ->capture_default_str();
  command
      .add_option("--speculative-tokens", flags->speculative_tokens,
                  "with --speculative mtp: tokens drafted per step, 1 .. 4 (the MTP layer applied to its own output)")
      ->capture_default_str();
  command
      .add_option("--kv-cache-dtype", flags->kv_cache_dtype,
                  "storage of the MLA latents and the indexer's pooled keys: fp32 (as computed), bf16, fp8 or "
                  "int8 (as the engine's; not fp32: the run goes through the engine)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp8", "int8"}))
      ->capture_default_str();
  command.footer(
      "--path reference dequantizes FP8 weights to fp32 in memory: fine for tiny models, far too large for "
      "the full 321B model.");
  return [flags] { return RunGenerate(*flags); };
});

}  // namespace
}  // namespace glint::cli

// glint score: per-token negative log-likelihood and perplexity of token sequences, optional logits dump, and
// comparison with reference logits (max error, top-1 agreement, KL divergence). How users check a quantized or
// converted model against a reference.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>

#include "base/log.h"
#include "base/timer.h"
#include "cli/command.h"
#include "cli/distributed.h"
#include "cli/image_files.h"
#include "cli/model_flags.h"
#include "engine/sampling.h"
#include "io/safetensors.h"
#include "io/token_file.h"
#include "memory/item_arena.h"
#include "model/model.h"
#include "tokenizer/image_tokens.h"
#include "tokenizer/tokenizer.h"

namespace glint::cli {
namespace {

struct ScoreFlags {
  ModelFlag model;
  bool fast = false;              // the int8/bf16 fast path instead of the fp32 reference
  std::string experts;            // --experts (fast path)
  std::string mla_attention;      // --mla-attention (fast path)
  bool keep_small_pages = false;  // --keep-small-pages (fast path)
  ExpertCacheFlags expert_cache;  // --expert-memory, --expert-io, --expert-trace (fast path)
  int threads = 0;
  ParallelFlags parallel;  // --tp / --ep under mpirun
  std::string tokens_file;
  std::string dump_logits;
  std::string reference;
  std::string kda_state = "fp32";       // storage of the KDA recurrent state: fp32 | bf16
  std::string kv_cache_dtype = "fp32";  // storage of the MLA latents and pooled indexer keys
  bool token_by_token = false;          // one token per forward call (the decode path) instead of one call per sequence
  std::vector<std::string> images;      // --images FILE...: fill the sequences' <|image|> placeholders, in order
  media::DecodeLimits image_limits;
};

// Image rows of one sequence: the token indices they replace (ascending) and the rows [positions, D].
struct SequenceImages {
  std::vector<int32_t> positions;
  std::vector<float> rows;
};

// --images: the tower's rows fill the placeholders of the sequences in order (sequence 0's first), whole images
// only: each sequence's placeholder count must be the token count of the images it takes.
Result<std::vector<SequenceImages>> AssignImageRows(const std::vector<std::vector<int32_t>>& sequences,
                                                    int32_t placeholder, ImageEncoder& tower,
                                                    const std::vector<std::shared_ptr<const VisionInput>>& images) {
  GLINT_ASSIGN_OR_RETURN(const std::vector<float> rows, EncodeImages(tower, images));
  const int64_t d = tower.config().out_hidden_size;
  std::vector<SequenceImages> out(sequences.size());
  size_t next = 0;       // the next image
  int64_t next_row = 0;  // its first row in `rows`
  for (size_t i = 0; i < sequences.size(); ++i) {
    for (size_t t = 0; t < sequences[i].size(); ++t) {
      if (sequences[i][t] == placeholder) out[i].positions.push_back(static_cast<int32_t>(t));
    }
    int64_t taken = 0;
    const int64_t wanted = static_cast<int64_t>(out[i].positions.size());
    while (taken < wanted && next < images.size()) taken += VisionTokenCount(tower.config(), *images[next++]);
    if (taken != wanted) {
      return InvalidArgument("sequence ", i, " holds ", wanted, " image placeholders but the --images it takes (in ",
                             "order) have ", taken, " image tokens; expected whole images, expanded as the processor ",
                             "does (N = merged patches per image)");
    }
    out[i].rows.assign(rows.begin() + next_row * d, rows.begin() + (next_row + wanted) * d);
    next_row += wanted;
  }
  if (next != images.size()) {
    return InvalidArgument(images.size() - next, " of the --images have no placeholders left in the sequences");
  }
  return out;
}

// The logits [T, V] of every position of `tokens` from a fresh sequence: one call, or one call per token (the
// decode path: the KDA state is stored, and with bf16 storage rounded, after every token). The sequence's memory
// is laid out with the chosen KDA state storage and bound like an engine's.
// --images: the files through the tower of the chosen path, assigned to the sequences' placeholders. Under mpirun
// only rank 0 gets here (the followers run its batch plans, which carry the rows: docs/distributed.md "Images").
Result<std::vector<SequenceImages>> ScoreImages(const ScoreFlags& flags, const std::string& dir, const ModelConfig& c,
                                                WorkerPool& pool, const std::vector<std::vector<int32_t>>& sequences) {
  GLINT_ASSIGN_OR_RETURN(const auto inputs, LoadImageFiles(flags.images, dir, flags.image_limits));
  auto tower = LoadImageEncoder(dir, c, !flags.fast, &pool);
  if (!tower.ok()) return tower.status().WithContext("--images needs the model's vision tower");
  // The placeholder is config.json's image_token_id; tokenizer.json, where there is one, must agree with it.
  std::optional<Tokenizer> tokenizer;
  if (std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json")) {
    GLINT_ASSIGN_OR_RETURN(tokenizer, Tokenizer::Load(dir));
  }
  const ImageTokenIds& ids = c.image_tokens;
  auto tokens = ResolveImageTokens(ids.image, ids.start, ids.end, tokenizer ? &*tokenizer : nullptr);
  if (!tokens.ok()) return tokens.status().WithContext("--images");
  return AssignImageRows(sequences, tokens->image, **tower, inputs);
}

Result<std::vector<float>> SequenceLogits(const Model& model, std::span<const int32_t> tokens, KdaStateStorage storage,
                                          KvCacheDtype kv_dtype, bool token_by_token, const SequenceImages& images) {
  const ModelConfig& c = model.config();
  CacheOptions options;
  options.block_tokens = StandaloneBlockTokens(c);
  options.kda_state = storage;
  options.kv_dtype = kv_dtype;
  GLINT_ASSIGN_OR_RETURN(CacheLayout made, model.CacheLayoutFor(options));
  auto layout = std::make_shared<const CacheLayout>(std::move(made));
  const int64_t length = static_cast<int64_t>(tokens.size());
  const int64_t blocks_needed = (length + options.block_tokens - 1) / options.block_tokens;
  GLINT_ASSIGN_OR_RETURN(ItemArena blocks, ItemArena::Fixed(blocks_needed, layout->block_bytes));
  GLINT_ASSIGN_OR_RETURN(ItemArena slot, ItemArena::Fixed(1, layout->slot_bytes));
  std::vector<int32_t> table(blocks_needed);  // [blocks]
  for (int64_t b = 0; b < blocks_needed; ++b) table[b] = static_cast<int32_t>(b);
  SequenceState state = model.BindSequence(layout, {&blocks, &table, slot.Item(0)}, 0);
  // Under mpirun the other ranks keep copies of this memory (lockstep.h): they are told of it, and of its end.
  struct MirroredPools {
    EngineMirror* mirror;
    int64_t id;
    ~MirroredPools() {
      if (mirror != nullptr) mirror->DetachPools(id);
    }
  };
  const ItemArena* arenas[] = {&blocks, &slot};
  EngineMirror* mirror = model.engine_mirror();
  const MirroredPools mirrored{mirror, mirror != nullptr ? mirror->AttachPools(layout, arenas) : -1};
  std::vector<EntryOutput> outputs;
  if (!token_by_token) {
    BatchEntry entry{tokens, &state, LogitsWanted::kAll, false};
    entry.embedding_positions = images.positions;
    entry.embedding_rows = images.rows;
    GLINT_RETURN_IF_ERROR(model.Forward({&entry, 1}, outputs));
    return std::move(outputs[0].logits);
  }
  const int64_t d = c.hidden_size;
  size_t image_row = 0;  // the next of images.positions
  static constexpr int32_t kFirst = 0;
  std::vector<float> logits;  // [T, V]
  logits.reserve(length * c.vocab_size);
  for (int64_t t = 0; t < length; ++t) {
    BatchEntry entry{tokens.subspan(t, 1), &state, LogitsWanted::kLast, false};
    if (image_row < images.positions.size() && images.positions[image_row] == t) {
      entry.embedding_positions = {&kFirst, 1};
      entry.embedding_rows = std::span<const float>(images.rows).subspan(image_row * d, d);
      ++image_row;
    }
    GLINT_RETURN_IF_ERROR(model.Forward({&entry, 1}, outputs));
    logits.insert(logits.end(), outputs[0].logits.begin(), outputs[0].logits.end());
  }
  return logits;
}

// log Σ exp(row) with the max subtracted, in double.   row: [V]
double LogSumExp(const float* row, int64_t n) {
  double top = row[0];
  for (int64_t i = 1; i < n; ++i) top = std::max<double>(top, row[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(row[i] - top);
  return top + std::log(sum);
}

struct Comparison {
  double max_abs_error = 0;
  double max_rel_error = 0;  // max |Δ| / std(reference logits of that row)
  double top1_agreement = 0;
  double mean_kl = 0;  // KL(reference ‖ ours), nats, mean over positions
};

Comparison Compare(const std::vector<float>& ours, const std::vector<float>& reference, int64_t rows, int64_t vocab) {
  Comparison result;
  int64_t agree = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = &ours[r * vocab];
    const float* b = &reference[r * vocab];
    double mean = 0, variance = 0;
    for (int64_t i = 0; i < vocab; ++i) mean += b[i];
    mean /= vocab;
    for (int64_t i = 0; i < vocab; ++i) variance += (b[i] - mean) * (b[i] - mean);
    const double row_std = std::sqrt(variance / vocab);
    double row_max = 0;
    for (int64_t i = 0; i < vocab; ++i) row_max = std::max(row_max, std::fabs(static_cast<double>(a[i]) - b[i]));
    result.max_abs_error = std::max(result.max_abs_error, row_max);
    if (row_std > 0) result.max_rel_error = std::max(result.max_rel_error, row_max / row_std);
    agree += ArgMax({a, static_cast<size_t>(vocab)}) == ArgMax({b, static_cast<size_t>(vocab)});
    const double log_za = LogSumExp(a, vocab), log_zb = LogSumExp(b, vocab);
    double kl = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      const double log_pb = b[i] - log_zb;
      kl += std::exp(log_pb) * (log_pb - (a[i] - log_za));
    }
    result.mean_kl += std::max(0.0, kl);
  }
  result.top1_agreement = rows ? static_cast<double>(agree) / rows : 0;
  result.mean_kl = rows ? result.mean_kl / rows : 0;
  return result;
}

Status RunScore(const ScoreFlags& flags) {
  WorkerPool pool(flags.threads > 0 ? flags.threads : static_cast<int>(std::thread::hardware_concurrency()));
  std::unique_ptr<Model> model;
  if (!flags.fast && !flags.experts.empty()) return InvalidArgument("--experts applies to the fast path; add --fast");
  if (!flags.fast && !flags.mla_attention.empty()) {
    return InvalidArgument("--mla-attention applies to the fast path; add --fast");
  }
  if (!flags.fast && flags.keep_small_pages)
    return InvalidArgument("--keep-small-pages applies to the fast path; add --fast");
  if (!flags.fast && flags.expert_cache.given()) {
    return InvalidArgument("--expert-memory and --expert-trace apply to the fast path; add --fast");
  }
  GLINT_ASSIGN_OR_RETURN(const ModelParallel parallel, ToModelParallel(flags.parallel));
  Result<std::unique_ptr<Model>> loaded = [&]() -> Result<std::unique_ptr<Model>> {
    if (flags.fast) {
      return LoadFastModel(flags.model, pool, flags.experts, flags.expert_cache, parallel, flags.mla_attention,
                           flags.keep_small_pages);
    }
    GLINT_ASSIGN_OR_RETURN(std::unique_ptr<ReferenceModel> reference, LoadReferenceModel(flags.model, parallel));
    return std::unique_ptr<Model>(std::move(reference));
  }();
  GLINT_ASSIGN_OR_RETURN(const std::string dir, ResolveModelDir(flags.model));
  GLINT_ASSIGN_OR_RETURN(model, JoinRanks(std::move(loaded), dir));
  const ModelConfig& c = model->config();
  const KdaStateStorage storage = flags.kda_state == "bf16" ? KdaStateStorage::kBfloat16 : KdaStateStorage::kFloat32;
  GLINT_ASSIGN_OR_RETURN(const KvCacheDtype kv_dtype, ParseKvCacheDtype(flags.kv_cache_dtype));
  GLINT_ASSIGN_OR_RETURN(auto sequences, ReadTokenSequences(flags.tokens_file, c.vocab_size));
  std::vector<SequenceImages> images(sequences.size());
  if (!flags.images.empty()) {
    GLINT_ASSIGN_OR_RETURN(images, ScoreImages(flags, dir, c, pool, sequences));
  }
  std::unique_ptr<Checkpoint> reference;
  if (!flags.reference.empty()) {
    GLINT_ASSIGN_OR_RETURN(Checkpoint opened, Checkpoint::Open(flags.reference));
    reference = std::make_unique<Checkpoint>(std::move(opened));
  }
  SafetensorsWriter dump;
  std::printf("%-4s %7s %10s %10s", "seq", "tokens", "mean NLL", "ppl");
  if (reference) std::printf(" %12s %12s %8s %12s", "max|dlogit|", "max/std", "top-1", "mean KL");
  std::printf("\n");
  double total_nll = 0;
  int64_t total_predicted = 0;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const auto& tokens = sequences[i];
    const int64_t length = static_cast<int64_t>(tokens.size());
    auto computed = SequenceLogits(*model, tokens, storage, kv_dtype, flags.token_by_token, images[i]);
    if (!computed.ok()) return computed.status().WithContext(StrCat("sequence ", i));
    const std::vector<float>& logits = *computed;  // [T, V]
    // NLL of token t+1 under the distribution at position t.
    double nll = 0;
    for (int64_t t = 0; t + 1 < length; ++t) {
      const float* row = &logits[t * c.vocab_size];
      nll += LogSumExp(row, c.vocab_size) - row[tokens[t + 1]];
    }
    const int64_t predicted = length - 1;
    total_nll += nll;
    total_predicted += predicted;
    const double mean_nll = predicted ? nll / predicted : 0;
    std::printf("%-4zu %7lld %10.4f %10.3f", i, static_cast<long long>(length), mean_nll, std::exp(mean_nll));
    const std::string name = "logits." + std::to_string(i);
    if (reference) {
      GLINT_ASSIGN_OR_RETURN(TensorView view, reference->View(name));
      if (view.dtype() != DType::kF32 || view.shape() != std::vector<int64_t>{length, c.vocab_size}) {
        return InvalidArgument(flags.reference, ": '", name, "' must be F32 [", length, ", ", c.vocab_size, "]");
      }
      std::vector<float> expected(length * c.vocab_size);
      std::memcpy(expected.data(), view.bytes.data(), view.bytes.size());
      const Comparison cmp = Compare(logits, expected, length, c.vocab_size);
      std::printf(" %12.3e %12.3e %7.2f%% %12.3e", cmp.max_abs_error, cmp.max_rel_error, 100 * cmp.top1_agreement,
                  cmp.mean_kl);
    }
    std::printf("\n");
    if (!flags.dump_logits.empty()) GLINT_RETURN_IF_ERROR(dump.AddF32(name, {length, c.vocab_size}, logits));
  }
  if (total_predicted > 0) {
    std::printf("all  %7lld %10.4f %10.3f\n",
                static_cast<long long>(total_predicted) + static_cast<long long>(sequences.size()),
                total_nll / total_predicted, std::exp(total_nll / total_predicted));
  }
  if (!flags.dump_logits.empty()) {
    GLINT_RETURN_IF_ERROR(dump.WriteTo(flags.dump_logits));
    LogInfo("wrote logits of ", sequences.size(), " sequences to ", flags.dump_logits);
  }
  return Status::Ok();
}

GLINT_REGISTER_COMMAND(
    "score", "Per-token NLL and perplexity of token sequences; compare logits with a reference", 30,
    [](CLI::App& command) {
      auto flags = std::make_shared<ScoreFlags>();
      AddModelFlag(command, flags->model);
      command.add_flag("--fast", flags->fast,
                       "run the int8/bf16 fast path (compare with the fp32 path's --dump-logits "
                       "through --reference)");
      command.add_option("--threads", flags->threads, "fast path threads (default: all cores)");
      AddExpertsFlag(command, flags->experts);
      AddMlaAttentionFlag(command, flags->mla_attention);
      AddKeepSmallPagesFlag(command, flags->keep_small_pages);
      AddExpertMemoryFlag(command, flags->expert_cache);
      AddParallelFlags(command, flags->parallel);
      command
          .add_option("--tokens-file", flags->tokens_file, "JSON list of token-id lists, e.g. the golden tokens.json")
          ->required()
          ->check(CLI::ExistingFile);
      command.add_option("--dump-logits", flags->dump_logits,
                         "write the logits of every position as F32 tensors logits.<i> [T, vocab]");
      command
          .add_option("--reference", flags->reference,
                      "safetensors with logits.<i> to compare against (e.g. golden expected.safetensors)")
          ->check(CLI::ExistingFile);
      command
          .add_option("--kda-state", flags->kda_state,
                      "storage of the KDA recurrent state (as the engine's --kda-state)")
          ->check(CLI::IsMember({"fp32", "bf16"}))
          ->capture_default_str();
      command
          .add_option("--kv-cache-dtype", flags->kv_cache_dtype,
                      "storage of the MLA latents and pooled indexer keys (as the engine's "
                      "--kv-cache-dtype): fp32, bf16, fp8 or int8")
          ->check(CLI::IsMember({"fp32", "bf16", "fp8", "int8"}))
          ->capture_default_str();
      command.add_option("--images", flags->images,
                         "image files whose tower rows fill the sequences' <|image|> "
                         "placeholders in order (the sequences already hold them expanded: "
                         "N per image, as the processor writes them)");
      command.add_option("--max-image-bytes", flags->image_limits.max_bytes, "largest image file")
          ->capture_default_str();
      command.add_option("--max-image-pixels", flags->image_limits.max_pixels, "largest decoded image, w x h")
          ->capture_default_str();
      command.add_flag("--token-by-token", flags->token_by_token,
                       "one token per forward call (the decode path) instead of the whole "
                       "sequence at once");
      return [flags] { return RunScore(*flags); };
    });

}  // namespace
}  // namespace glint::cli

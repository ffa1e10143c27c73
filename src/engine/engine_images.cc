// The engine's image path (docs/vision.md "In the engine"): a request's images are checked against its prompt,
// keyed for the prefix cache by their bytes' hash, encoded by the vision tower once (when a scheduled chunk first
// reaches one, inside the step's token budget), and their rows handed to every chunk that covers placeholders.
#include <algorithm>

#include "base/timer.h"
#include "engine/engine_core.h"

namespace glint {
namespace {

// SplitMix64's finaliser: spreads the image hash over the key values of its positions.
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// The key of placeholder j of an image with hash `key`: 31 bits with the top bit set (text tokens are ≥ 0). The
// first two positions carry the hash's low and high 31 bits, so a block holding two placeholders compares 62
// bits of it exactly (Lookup compares key tokens, not only their chained hash).
int32_t PlaceholderKey(uint64_t key, int64_t j) {
  const uint64_t bits = j == 0 ? key : j == 1 ? key >> 31 : Mix(key + static_cast<uint64_t>(j) * 0x9E3779B97F4A7C15ULL);
  return static_cast<int32_t>(static_cast<uint32_t>(bits & 0x7FFFFFFFu) | 0x80000000u);
}

}  // namespace

Status EngineCore::ValidateImages(const Request& request) const {
  if (request.images.empty()) return Status::Ok();
  if (model_.shard_plan().dp_attention) {
    return Unimplemented("requests with images are not served under --dp-attention yet (docs/status.md)");
  }
  if (images_ == nullptr) {
    return FailedPrecondition(
        "the request has images but this engine has no vision tower (the model has no "
        "vision_config, or its model.visual.* tensors were not loaded)");
  }
  const std::vector<int32_t>& prompt = request.prompt;
  const int64_t length = static_cast<int64_t>(prompt.size());
  int64_t next = 0;  // the first position the next image may take
  for (size_t k = 0; k < request.images.size(); ++k) {
    const RequestImage& image = request.images[k];
    if (image.input == nullptr) return InvalidArgument("image ", k, " of the request has no pixels");
    GLINT_RETURN_IF_ERROR(CheckVisionInput(images_->config(), *image.input).WithContext(StrCat("image ", k)));
    const int64_t tokens = VisionTokenCount(images_->config(), *image.input);
    if (image.start < next || image.start > length - tokens) {
      return OutOfRange("image ", k, " takes prompt positions ", image.start, " .. ", image.start + tokens - 1,
                        "; expected placeholders from position ", next, " inside the prompt of ", length,
                        " tokens, images in order and not overlapping");
    }
    if (tokens > options_.max_batch_tokens) {
      return InvalidArgument("image ", k, " has ", tokens, " image tokens, more than the step's token budget (",
                             options_.max_batch_tokens, ", --max-batch-tokens): the tower runs a whole image in ",
                             "one step");
    }
    const int32_t placeholder = prompt[request.images.front().start];
    for (int64_t p = image.start; p < image.start + tokens; ++p) {
      if (prompt[p] != placeholder) {
        return InvalidArgument("prompt position ", p, " of image ", k, " holds token ", prompt[p],
                               ", not the image placeholder ", placeholder);
      }
    }
    next = image.start + tokens;
  }
  return Status::Ok();
}

std::vector<int32_t> EngineCore::ImageKeyTokens(const Request& request, const std::vector<ImageRows>& images) {
  if (images.empty()) return {};
  std::vector<int32_t> keys = request.prompt;
  for (size_t k = 0; k < images.size(); ++k) {
    for (int64_t j = 0; j < images[k].tokens; ++j) keys[images[k].start + j] = PlaceholderKey(request.images[k].key, j);
  }
  return keys;
}

std::vector<int32_t> EngineCore::PrefixKeys(const Request& request) const {
  if (request.images.empty() || images_ == nullptr) return request.prompt;
  std::vector<ImageRows> images;
  for (const RequestImage& image : request.images) {
    images.push_back({image.start, VisionTokenCount(images_->config(), *image.input), {}, false});
  }
  return ImageKeyTokens(request, images);
}

int64_t EngineCore::ImageBudget(SequenceId id, int64_t start, int64_t& count, int64_t budget) const {
  const std::vector<ImageRows>& images = requests_.at(samples_.at(id).request).images;
  int64_t extra = 0;
  for (const ImageRows& image : images) {
    if (image.encoded || image.start + image.tokens <= start) continue;
    if (image.start >= start + count) break;
    const int64_t first = std::max(image.start, start) - start;  // the image's first position in the chunk
    if (first + 1 + extra + image.tokens > budget) {
      count = first;  // the chunk ends before it
      return extra;
    }
    extra += image.tokens;
  }
  count = std::min(count, budget - extra);  // still past the first position of every image counted
  return extra;
}

Status EngineCore::EncodeImage(RequestRecord& record, size_t k) {
  ImageRows& image = record.images[k];
  const int64_t d = model_.config().hidden_size;
  Stopwatch clock;
  Result<std::vector<float>> rows = images_->Encode(*record.request.images[k].input);
  counters_.vision_seconds += clock.Seconds();
  if (rows.ok() && static_cast<int64_t>(rows->size()) != image.tokens * d) {
    rows = InternalError("the tower gave ", rows->size(), " values for ", image.tokens, " rows of ", d);
  }
  if (!rows.ok()) return rows.status().WithContext(StrCat("the vision tower failed on image ", k));
  image.rows = std::move(rows).value();
  image.encoded = true;
  ++counters_.images_encoded;
  counters_.image_tokens_encoded += image.tokens;
  return Status::Ok();
}

bool EngineCore::EncodeImages(StepWork& step) {
  std::vector<std::pair<RequestId, std::string>> failed;
  for (const ScheduledChunk& chunk : step.plan.chunks) {
    const RequestId request = samples_.at(chunk.id).request;
    RequestRecord& record = requests_.at(request);
    for (size_t k = 0; k < record.images.size(); ++k) {
      const ImageRows& image = record.images[k];
      if (image.encoded || image.start + image.tokens <= chunk.start || image.start >= chunk.start + chunk.count) {
        continue;
      }
      if (Status status = EncodeImage(record, k); !status.ok()) {
        failed.push_back({request, std::string(status.message())});
        break;
      }
    }
  }
  if (failed.empty()) return true;
  for (const auto& [request, message] : failed) {
    if (requests_.count(request) != 0) FailRequests({request}, message, step.outputs);
  }
  step.results.resize(step.plan.chunks.size());
  step.emissions.resize(step.plan.chunks.size());
  return KeepUnfinished(step);
}

void EngineCore::AttachImageRows(StepWork& step, size_t i, BatchEntry& entry) {
  const ScheduledChunk& chunk = step.plan.chunks[i];
  if (step.image_rows.size() != step.plan.chunks.size()) {  // before any span into them is taken (i = 0)
    step.image_indices.resize(step.plan.chunks.size());
    step.image_rows.resize(step.plan.chunks.size());
  }
  if (chunk.draft > 0) return;  // a verification computes generated tokens only
  const int64_t d = model_.config().hidden_size;
  const RequestRecord& record = requests_.at(samples_.at(chunk.id).request);
  std::vector<int32_t>& indices = step.image_indices[i];
  std::vector<float>& rows = step.image_rows[i];
  for (const ImageRows& image : record.images) {
    const int64_t lo = std::max(image.start, chunk.start);
    const int64_t hi = std::min(image.start + image.tokens, chunk.start + chunk.count);
    if (lo >= hi) continue;
    GLINT_CHECK(image.encoded) << "image rows of sequence " << chunk.id << " were not computed";
    for (int64_t p = lo; p < hi; ++p) indices.push_back(static_cast<int32_t>(p - chunk.start));
    rows.insert(rows.end(), image.rows.begin() + (lo - image.start) * d, image.rows.begin() + (hi - image.start) * d);
  }
  entry.embedding_positions = indices;
  entry.embedding_rows = rows;
}

Status EngineCore::MtpImageRows(SequenceId id, int64_t first, int64_t count, std::vector<int32_t>& indices,
                                std::vector<float>& rows) {
  RequestRecord& record = requests_.at(samples_.at(id).request);
  const int64_t d = model_.config().hidden_size;
  for (size_t k = 0; k < record.images.size(); ++k) {
    const ImageRows& image = record.images[k];
    const int64_t lo = std::max(image.start, first), hi = std::min(image.start + image.tokens, first + count);
    if (lo >= hi) continue;
    // Not encoded yet only when the chunk just computed ended right before the image (its pair's next token is
    // the image's first placeholder): the tower runs now instead of in the next step, which then needs no tower.
    if (!image.encoded) GLINT_RETURN_IF_ERROR(EncodeImage(record, k));
    for (int64_t p = lo; p < hi; ++p) indices.push_back(static_cast<int32_t>(p - first));
    rows.insert(rows.end(), image.rows.begin() + (lo - image.start) * d, image.rows.begin() + (hi - image.start) * d);
  }
  return Status::Ok();
}

}  // namespace glint

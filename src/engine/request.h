// What other threads hand the engine, and what it hands back (docs/engine.md "API").
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/sampling.h"
#include "grammar/matcher.h"
#include "vision/tower.h"

namespace glint {

using RequestId = uint64_t;

enum class FinishReason {
  kNone,       // not finished
  kStop,       // an end id, a stop token id or a stop string
  kLength,     // max_tokens or the context limit
  kCancelled,  // Cancel()
  kError,      // the engine failed on this request (RequestOutput::error says why)
};
std::string_view FinishReasonName(FinishReason reason);  // "stop", "length", "cancelled", "error"

struct StopConditions {
  int64_t max_tokens = -1;              // generated tokens; −1: up to the context limit (max_model_len)
  std::vector<int32_t> stop_token_ids;  // finish when one is generated (in addition to the end ids)
  bool ignore_eos = false;              // do not finish at the engine's end ids (stop_token_ids still do)
  // Finish when the generated text contains one; the text returned stops just before it (never includes it).
  // Needs an engine with a tokenizer.
  std::vector<std::string> stop_strings;
  bool skip_special_tokens = true;  // leave special tokens out of the returned text
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;  // log softmax of the model's raw logits (before penalties and temperature)
};

// Figures of one sample, on its last output. Times are seconds on the engine's clock (since it started).
struct SequenceTimings {
  double arrival = 0;          // Submit
  double first_scheduled = 0;  // first admitted to a step
  double first_token = 0;      // its first generated token was produced
  double finished = 0;
  int64_t prompt_tokens = 0;
  int64_t cached_prompt_tokens = 0;  // restored from the prefix cache at the first admission
  int64_t generated_tokens = 0;
  int64_t preemptions = 0;
};

// The state of a sequence after its whole prompt, as one engine hands it to another (prefill/decode
// disaggregation, docs/disaggregation.md): the bytes exactly as they sit in the first engine's memory, so both
// engines must have the same cache layout (the transfer plane checks its fingerprint).
struct SequenceSnapshot {
  int64_t tokens = 0;             // positions computed: the prompt's length
  std::vector<std::byte> slot;    // the slot (KDA conv and recurrent state, indexer filling pools): slot_bytes
  std::vector<std::byte> blocks;  // the blocks covering positions < tokens, in order: ⌈tokens / block⌉ × block_bytes
  std::vector<float> logits;      // [V] the raw logits of the last prompt position
  // With the MTP layer (--speculative mtp; both empty without it). Its cache holds the pairs (h_p, x_{p+1}) of
  // p = 0 .. tokens − 2 (in the slot and blocks above; a streamed export packs it here instead, as MtpRegions lays
  // it out): the last pair needs the first token, which the importing engine draws, so it travels as `hidden`, the
  // trunk's final normed hidden state at the last prompt position [D], and that engine runs the pair.
  std::vector<float> hidden;
  std::vector<std::byte> mtp;
  // The bytes that carry state (the slot, the blocks, the MTP rows, the logits and the hidden row).
  int64_t Bytes() const {
    return static_cast<int64_t>(slot.size() + blocks.size() + mtp.size() +
                                (logits.size() + hidden.size()) * sizeof(float));
  }
};

// One layer's state of an export that streams (Request::stream_layers): LayerRegions(layout, layer) packed in order —
// its slot ranges, then for each block covering the prompt, in order, its block ranges.
struct LayerState {
  int64_t layer = 0;
  std::vector<std::byte> bytes;  // LayerStateBytes(layout, layer, ⌈tokens / block⌉)
};

struct RequestOutput {
  RequestId request = 0;
  int64_t index = 0;                   // which of the n samples
  std::vector<int32_t> tokens;         // tokens generated since the previous output of this sample (0 or 1)
  std::vector<TokenLogprob> logprobs;  // [tokens] the chosen token's, when asked for
  std::vector<std::vector<TokenLogprob>> top_logprobs;  // [tokens][k], most likely first, when asked for
  std::string text;  // new text (engines with a tokenizer); a stop string never appears in it
  double time = 0;   // when the step that made it finished (engine clock, seconds)
  FinishReason finish_reason = FinishReason::kNone;  // set on the sample's last output
  std::string error;                                 // kError: what went wrong
  std::string stop_string;                           // kStop by a stop string: which one
  std::optional<SequenceTimings> timings;            // on the sample's last output
  bool request_finished = false;                     // this was the last output of the whole request (all n samples)
  std::shared_ptr<const SequenceSnapshot> snapshot;  // Request::export_state: on the last output
  // Request::stream_layers: an output of its own per layer, handed to the sink from inside the step's forward pass
  // as soon as the prompt's last chunk has passed that layer (not finished; nothing else set but request and time).
  std::shared_ptr<const LayerState> layer;
};

// An output sink. OnOutput runs on the engine thread, in order, once per step in which the sequence produced
// something; it must return quickly (hand the output to another thread: see OutputQueue).
class RequestSink {
 public:
  virtual ~RequestSink() = default;
  virtual void OnOutput(RequestOutput output) = 0;
};

// An image of the prompt (docs/vision.md "In the engine"): its placeholder tokens are the prompt positions
// [start, start + VisionTokenCount(input)), all one id; the tower's rows replace their embeddings.
struct RequestImage {
  int64_t start = 0;
  std::shared_ptr<const VisionInput> input;  // the processor's patches
  uint64_t key = 0;                          // prefix-cache key: a hash of the image's encoded bytes (server: XXH3-64)
};

struct Request {
  std::vector<int32_t> prompt;       // token ids, at least one
  std::vector<RequestImage> images;  // in prompt order, placeholders not overlapping; needs an image encoder
  SamplingParams sampling;           // temperature 0 = greedy; penalties; `seed` is used only if `seeded`
  bool seeded = false;               // false: the engine draws a seed (outputs are not reproducible)
  StopConditions stop;
  int64_t n = 1;          // independent samples of the same prompt (the prompt is computed once)
  int64_t logprobs = -1;  // −1: none; k ≥ 0: log-probability of each token and the k most likely (k ≤ 20)
  // Structured output: each sample's tokens follow this grammar (a mask before sampling; end ids only once the
  // text is complete). Needs an engine with a tokenizer (the masks are over its byte strings).
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  std::shared_ptr<RequestSink> sink;
  // A batch job's request (docs/batch.md): scheduled after online ones, preempted first (scheduler.h).
  bool batch = false;
  // Prefill/decode disaggregation (docs/disaggregation.md). export_state: compute the prompt only; the one output
  // carries the snapshot of the state after it (finish reason stop, no token) and the prompt stays in the prefix
  // cache. imported: the state after the prompt, computed elsewhere, goes into the memory reserved by `lease`
  // (EngineCore::Lease); the first token is sampled from its logits here, so penalties, grammar, seed and
  // logprobs all behave as if the prompt had been computed here.
  bool export_state = false;
  // With export_state: each layer's state goes to the sink as a LayerState output while the later layers compute,
  // and the snapshot of the last output holds the token count, the logits and the MTP layer's part only (slot and
  // blocks empty).
  bool stream_layers = false;
  std::shared_ptr<const SequenceSnapshot> imported;
  uint64_t lease = 0;
};

// A sink that queues outputs for the thread that waits on them (an HTTP handler).
class OutputQueue final : public RequestSink {
 public:
  void OnOutput(RequestOutput output) override;
  // The next output; nullopt if none arrived within `timeout`.
  std::optional<RequestOutput> Pop(std::chrono::milliseconds timeout);
  // Blocks until the next output.
  RequestOutput Pop();

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<RequestOutput> outputs_;
};

}  // namespace glint

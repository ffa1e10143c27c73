// `glint make-tiny`: a deterministic tiny checkpoint of the real architecture in HF layout, and the embedded
// default model built from it. See docs/models.md ("Tiny models").
//
// A checkpoint directory holds config.json (release layout), generation_config.json, model.safetensors (exactly
// the tensors of ExpectedTensors(config) with their release storage: FP8 e4m3 + F32 `_scale_inv` block scales,
// BF16 or F32), tokenizer.json (byte-level BPE trained on TinyTokenizerCorpus) and tokenizer_config.json (special
// tokens + GLM chat template). Same preset and seed → byte-identical files on every platform.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"

namespace glint {

struct MakeTinyProgress {
  uint64_t bytes_done = 0;  // of model.safetensors
  uint64_t bytes_total = 0;
  std::string tensor;  // being written
};

struct MakeTinyOptions {
  std::string out_dir;
  uint64_t seed = 0;
  std::string preset = "default";
  bool force = false;  // replace an existing non-empty out_dir (only one that looks like a model directory)
  std::function<void(const MakeTinyProgress&)> progress;  // called as model.safetensors is written; may be empty
};

struct MakeTinyReport {
  std::string out_dir;
  int64_t num_tensors = 0;     // in model.safetensors, including `_scale_inv`
  int64_t num_parameters = 0;  // elements of the weights (without scales)
  uint64_t safetensors_bytes = 0;
  int64_t tokenizer_merges = 0;
};

// Writes the checkpoint to a temporary directory beside `out_dir` and renames it into place, so `out_dir` is
// either absent, or the old contents, or the complete new checkpoint. An existing non-empty `out_dir` is an error
// unless `force`.
Result<MakeTinyReport> MakeTinyModel(const MakeTinyOptions& options);

// Writes the checkpoint files into an existing empty directory (no atomicity; MakeTinyModel wraps it).
Result<MakeTinyReport> WriteTinyModelFiles(const std::string& dir, const std::string& preset, uint64_t seed,
                                           const std::function<void(const MakeTinyProgress&)>& progress);

// fp32 → e4m3fn as FloatToFp8E4m3 (quant/formats.h) computes it, by bit manipulation (fast enough for GBs).
uint8_t EncodeFp8E4m3ForTinyModel(float value);

// The name of the embedded default model's directory in the cache; bump the version when the generator's
// output changes, so old caches are not mistaken for the new model.
inline constexpr const char* kDefaultModelDirName = "tiny-default-v2";  // v2: with a vision tower

// $GLINT_CACHE_DIR, else $XDG_CACHE_HOME/glint, else $HOME/.cache/glint (first one set and non-empty).
Result<std::string> GlintCacheDir();

// The default model (preset "default", seed 0) in GlintCacheDir()/kDefaultModelDirName, generated there on first use.
// Safe when several processes race: each generates into its own temporary directory and renames it into place;
// the first rename wins and the others discard their copy.
Result<std::string> EnsureDefaultModel();

}  // namespace glint

// What a speculative-decoding verification costs on the fast path (docs/performance.md "Speculative decoding"):
// for B sequences with a 64-token context, the median time and weight bytes of a plain decode step (1 row per
// sequence) against a verification of K drafts (K + 1 rows per sequence, distinct tokens, with the rollback
// snapshot of the KDA state; `--speculative-tokens K`), and, when the model has an MTP layer, of one batched MTP
// call (one pair per sequence, FastModel::MtpForwardBatch: a chained draft costs K of them). Prints figures;
// fails only on bad arguments or a model error.
//
//   glint_verify_bench MODEL_DIR [THREADS=2] [STEPS=8] [BATCHES=1,4,16] [DRAFTS=1]   (DRAFTS: K values, e.g. 1,2,3)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "base/timer.h"
#include "base/worker_pool.h"
#include "fast/fast_model.h"

namespace glint {
namespace {

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

Status Run(const std::string& dir, int threads, int steps, const std::vector<int>& batches,
           const std::vector<int>& drafts) {
  WorkerPool pool(threads);
  GLINT_ASSIGN_OR_RETURN(std::unique_ptr<FastModel> model, FastModel::Load(dir, pool));
  const ModelConfig& c = model->config();
  const int64_t context = 64;
  std::printf("%s: %lld layers, hidden %lld, vocab %lld, %d threads; context %lld tokens; medians of %d steps\n",
              dir.c_str(), static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.hidden_size),
              static_cast<long long>(c.vocab_size), threads, static_cast<long long>(context), steps);
  std::printf("%6s %7s %12s %12s %13s %13s %10s %12s\n", "batch", "drafts", "decode ms", "decode GB", "verify ms",
              "verify GB", "ratio", "MTP ms");
  for (int batch : batches) {
    for (int k : drafts) {
      const auto layout = std::make_shared<const CacheLayout>(model->CacheLayoutFor({.block_tokens = 64}).value());
      std::vector<SequenceState> states;
      for (int b = 0; b < batch; ++b) states.push_back(model->NewSequence());
      std::vector<std::vector<std::byte>> snapshots(batch, std::vector<std::byte>(layout->checkpoint_bytes + 64));
      for (int b = 0; b < batch; ++b) {  // a context per sequence (any ids: the cost does not depend on them)
        std::vector<int32_t> prompt(context);
        for (int64_t i = 0; i < context; ++i)
          prompt[i] = static_cast<int32_t>((i * 7919 + 131 * b + 13) % c.vocab_size);
        std::vector<EntryOutput> outputs;
        BatchEntry entry{prompt, &states[b], LogitsWanted::kNone, false};
        GLINT_RETURN_IF_ERROR(model->Forward({&entry, 1}, outputs));
      }
      std::vector<double> decode_ms, verify_ms, mtp_ms, decode_gb, verify_gb;
      for (int step = 0; step < steps + 1; ++step) {  // the first of each is a warm-up
        for (int rows : {1, k + 1}) {
          const bool verify = rows > 1;
          std::vector<std::vector<int32_t>> tokens(batch);
          std::vector<BatchEntry> entries;
          std::vector<StateCheckpoint> rollbacks(batch);  // [batch] the KDA state after row 0 of a verification
          for (int b = 0; b < batch; ++b) {
            for (int r = 0; r < rows; ++r) {
              tokens[b].push_back(static_cast<int32_t>((977 * step + 389 * b + 61 * r + 5) % c.vocab_size));
            }
            BatchEntry entry{tokens[b], &states[b], verify ? LogitsWanted::kAll : LogitsWanted::kLast,
                             model->has_mtp()};
            if (verify) {
              rollbacks[b] = {states[b].tokens + 1, snapshots[b].data()};
              entry.rollback = {&rollbacks[b], 1};
            }
            entries.push_back(entry);
          }
          std::vector<EntryOutput> outputs;
          Stopwatch clock;
          GLINT_RETURN_IF_ERROR(model->Forward(entries, outputs));
          const double ms = 1000 * clock.Seconds();
          const double gb = model->last_step().weight_bytes_read / 1e9;
          if (!verify && step > 0) decode_ms.push_back(ms), decode_gb.push_back(gb);
          if (verify && step > 0) verify_ms.push_back(ms), verify_gb.push_back(gb);
          if (verify && model->has_mtp()) {  // one batched MTP call over the first row's pair of every sequence
            std::vector<MtpEntry> pairs;
            for (int b = 0; b < batch; ++b) {
              pairs.push_back({&states[b], std::span<const float>(outputs[b].hidden.data(), c.hidden_size),
                               std::span<const int32_t>(tokens[b].data() + 1, 1), LogitsWanted::kLast});
            }
            std::vector<std::vector<float>> logits;
            Stopwatch mtp_clock;
            GLINT_RETURN_IF_ERROR(model->MtpForwardBatch(pairs, logits));
            if (step > 0) mtp_ms.push_back(1000 * mtp_clock.Seconds());
          }
          if (verify) {  // as if every draft were rejected: back to the state after the first row
            for (int b = 0; b < batch; ++b) RollBack(states[b], snapshots[b].data(), states[b].tokens - k);
          }
        }
      }
      char mtp[32] = "-";
      if (!mtp_ms.empty()) std::snprintf(mtp, sizeof(mtp), "%.1f", Median(mtp_ms));
      std::printf("%6d %7d %12.1f %12.3f %13.1f %13.3f %9.2fx %12s\n", batch, k, Median(decode_ms), Median(decode_gb),
                  Median(verify_ms), Median(verify_gb), Median(verify_ms) / Median(decode_ms), mtp);
      std::fflush(stdout);
    }
  }
  return Status::Ok();
}

}  // namespace
}  // namespace glint

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR [THREADS=2] [STEPS=8] [BATCHES=1,4,16] [DRAFTS=1]\n", argv[0]);
    return 2;
  }
  const int threads = argc > 2 ? std::atoi(argv[2]) : 2;
  const int steps = argc > 3 ? std::atoi(argv[3]) : 8;
  const auto list = [](const char* text) {
    std::vector<int> values;
    std::stringstream in(text);
    for (std::string item; std::getline(in, item, ',');) values.push_back(std::atoi(item.c_str()));
    return values;
  };
  const std::vector<int> batches = argc > 4 ? list(argv[4]) : std::vector<int>{1, 4, 16};
  const std::vector<int> drafts = argc > 5 ? list(argv[5]) : std::vector<int>{1};
  if (threads < 1 || steps < 1 || batches.empty() || drafts.empty() ||
      std::any_of(batches.begin(), batches.end(), [](int b) { return b < 1; }) ||
      std::any_of(drafts.begin(), drafts.end(), [](int k) { return k < 1 || k > 4; })) {
    std::fprintf(stderr, "threads, steps and batch sizes must be at least 1, drafts 1 to 4 (--speculative-tokens)\n");
    return 2;
  }
  const glint::Status status = glint::Run(argv[1], threads, steps, batches, drafts);
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}

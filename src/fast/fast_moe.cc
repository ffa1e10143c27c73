// The fast MoE sublayer (fast_layers.h): route, group rows by expert, products per expert, combine.
//
// Bit-identity whatever the expert store holds: each expert's products depend only on its own rows and weights, and
// the combine runs after all of a wave's products in a fixed order (ascending expert id, shared expert last), so the
// order in which experts are computed (resident first, then as they land from disk) never changes the output.
#include <algorithm>
#include <cstring>
#include <utility>

#include "base/timer.h"
#include "experts/expert_store.h"
#include "fast/fast_layers.h"
#include "kernels/linear.h"
#include "kernels/vector_ops.h"

namespace glint {
namespace {

// One expert's work in a pass: its rows, gathered.
struct MoeJob {
  const FastMlpWeights* layout;             // the bound weights: layouts (and the data when resident)
  const FastMlpWeights* weights = nullptr;  // what the products read (set when the expert is resident)
  std::vector<int64_t> rows = {};           // pass rows
  std::vector<float> row_weights = {};      // routing weight per row
  int64_t offset = 0;                       // first row of this job in the gathered wave buffers
  QuantizedActivations input = {}, act = {};
  bool failed = false;  // its expert could not be read: no products, no contribution to the combine
};

std::vector<RouterChoice> Route(FastContext& ctx, const FastMoeWeights& w, const float* h, int64_t n,
                                std::span<const RouterChoice* const> forced_rows) {
  const ModelConfig& c = ctx.config;
  const int64_t num_experts = c.n_routed_experts;
  float* logits =
      ctx.act.moe.router_logits.Floats(n * num_experts);  // [n, E] fp32 logits from exact bf16 router weights
  ctx.Linear(w.router, h, c.hidden_size, n, logits, num_experts);
  const ScopedPart part(ctx.profile, PassPart::kMoeRouting);
  std::vector<RouterChoice> routed(n);
  for (int64_t t = 0; t < n; ++t) {
    const RouterChoice* forced = forced_rows.empty() ? nullptr : forced_rows[t];
    if (forced != nullptr) {  // the fp32 path's experts, weighted by this path's own scores
      routed[t].experts = forced->experts;
      routed[t].weights = RouterWeights(logits + t * num_experts, forced->experts, c);
      routed[t].margin = forced->margin;
    } else {
      routed[t] = RouteFromLogits(logits + t * num_experts, w.bias, c);
    }
  }
  return routed;
}

// The routing the jobs are grouped by: rows whose sequence already failed (ctx.row_errors) go to no routed expert,
// so that they cost no reads; `routed` itself stays as chosen (traces). A copy in `storage` only when a row failed.
const std::vector<RouterChoice>& WithoutFailedRows(const FastContext& ctx, const std::vector<RouterChoice>& routed,
                                                   std::vector<RouterChoice>& storage) {
  const auto failed = [](const Status& error) { return !error.ok(); };
  if (std::none_of(ctx.row_errors.begin(), ctx.row_errors.end(), failed)) return routed;
  storage = routed;
  for (size_t t = 0; t < ctx.row_errors.size() && t < storage.size(); ++t) {
    if (!ctx.row_errors[t].ok()) storage[t].experts.clear(), storage[t].weights.clear();
  }
  return storage;
}

// Jobs in ascending expert id (the accumulation order of HF's index_add_, §8.3), then the shared expert taking every
// row. `expert_ids` gets the routed jobs' ids.
std::vector<MoeJob> GroupByExpert(const FastMoeWeights& w, const std::vector<RouterChoice>& routed,
                                  const LocalExperts& local, std::vector<int32_t>& expert_ids) {
  const int64_t n = static_cast<int64_t>(routed.size());
  std::vector<int64_t> job_of_expert(w.experts.size(), -1);
  for (int64_t t = 0; t < n; ++t) {
    for (int32_t e : routed[t].experts) {
      if (local.routed.Holds(e)) job_of_expert[e] = 0;  // else another rank computes it
    }
  }
  std::vector<MoeJob> jobs;
  for (size_t e = 0; e < w.experts.size(); ++e) {
    if (job_of_expert[e] < 0) continue;
    job_of_expert[e] = static_cast<int64_t>(jobs.size());
    jobs.push_back({&w.experts[e]});
    expert_ids.push_back(static_cast<int32_t>(e));
  }
  for (int64_t t = 0; t < n; ++t) {
    for (size_t i = 0; i < routed[t].experts.size(); ++i) {
      const int64_t job_index = job_of_expert[routed[t].experts[i]];
      if (job_index < 0) continue;
      MoeJob& job = jobs[job_index];
      job.rows.push_back(t);
      job.row_weights.push_back(routed[t].weights[i]);
    }
  }
  for (const FastMlpWeights& shared : w.shared) {
    if (!local.shared) break;
    MoeJob job{&shared, &shared};
    for (int64_t t = 0; t < n; ++t) job.rows.push_back(t), job.row_weights.push_back(1.0f);
    jobs.push_back(std::move(job));
  }
  return jobs;
}

// The MoE input h [n, D] quantized once per row for the jobs' gate/up grouping: every row feeds its top-k experts
// and the shared one, and quantizing it per job did the same row k + 1 times (≈ half of a prefill's activation
// quantization). The quantizer works row by row, so a job's gathered codes are the bits a per-job quantization
// gives. Empty (tokens 0) when no job takes rows.
QuantizedActivations QuantizeMoeInput(FastContext& ctx, const std::vector<MoeJob>& jobs, const float* h, int64_t n) {
  if (jobs.empty()) return {};
  const ScopedPart part(ctx.profile, PassPart::kActivationQuant);
  return QuantizeActivationsParallel(ctx.pool, ctx.i8, jobs.front().layout->gate_up.ActivationGrouping(), h,
                                     ctx.config.hidden_size, n, ctx.MoeInputActivations());
}

// Each job's input rows, gathered from the once-quantized rows `quantized`; a job whose weights group K otherwise
// (int4 routed experts beside the int8 shared one) quantizes its rows itself, straight from h [n, D]. Only K and the
// group shape the codes: the weights' row counts may differ.
void GatherInputs(FastContext& ctx, std::vector<MoeJob>& jobs, size_t begin, size_t end, const float* h,
                  const QuantizedActivations& quantized, int64_t total_rows) {
  const int64_t d = ctx.config.hidden_size;
  ctx.pool.RunIfWorthIt(static_cast<int64_t>(end - begin), total_rows * d, kMinParallelElements, [&](int64_t i, int) {
    MoeJob& job = jobs[begin + i];
    const Int8Layout layout = job.layout->gate_up.ActivationGrouping();
    const int64_t rows = static_cast<int64_t>(job.rows.size()), padded = layout.padded_cols(), groups = layout.groups();
    ActivationScratch& scratch = ctx.ExpertActivations(2 * (begin + i));
    scratch.Reserve(rows, padded, groups);
    const bool gather = quantized.tokens > 0 && quantized.cols == layout.cols && quantized.group == layout.group;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t row = job.rows[r];
      if (gather) {
        std::memcpy(scratch.codes() + r * padded, quantized.codes + row * padded, static_cast<size_t>(padded));
        std::memcpy(scratch.scales() + r * groups, quantized.scales + row * groups, groups * sizeof(float));
        std::memcpy(scratch.bias_correction() + r * groups, quantized.bias_correction + row * groups,
                    groups * sizeof(int32_t));
      } else {
        ctx.i8.quantize(h + row * d, d, 1, layout.cols, layout.group, padded, scratch.codes() + r * padded,
                        scratch.scales() + r * groups, scratch.bias_correction() + r * groups);
      }
    }
    job.input = {rows, layout.cols, padded, layout.group, scratch.codes(), scratch.scales(), scratch.bias_correction()};
  });
}

// One product phase of the jobs in `group`, in one parallel call: tasks are (job, row-block range), so each expert's
// weights are read once for all of its rows, and experts spread over the threads.
template <typename MatrixOf, typename InputOf>
void RunPhase(FastContext& ctx, const std::vector<MoeJob>& jobs, std::span<const size_t> group, MatrixOf matrix_of,
              InputOf input_of, float* outputs, int64_t stride) {
  struct Task {
    size_t job;
    int64_t begin, end;
  };
  std::vector<Task> tasks;
  int64_t macs = 0;
  uint64_t bytes = 0;
  for (size_t j : group) {
    const PackedLinear& m = matrix_of(jobs[j]);
    const int64_t rows = static_cast<int64_t>(jobs[j].rows.size());
    ctx.weight_bytes_read += m.bytes();
    bytes += m.bytes();
    macs += m.rows() * m.cols() * rows;
    const int64_t blocks = (m.rows() + kInt8RowBlock - 1) / kInt8RowBlock;
    const int64_t grain = RowBlocksPerTask(blocks, ctx.pool.size(), kInt8RowBlock * m.cols() * rows);
    for (int64_t b = 0; b < blocks; b += grain) tasks.push_back({j, b, std::min(blocks, b + grain)});
  }
  const ScopedPart part(ctx.profile, PassPart::kInt8Products);
  Stopwatch watch;
  ctx.pool.Run(static_cast<int64_t>(tasks.size()), [&](int64_t i, int) {
    const Task& task = tasks[i];
    const MoeJob& job = jobs[task.job];
    ctx.IntegerGemm(matrix_of(job), input_of(job), task.begin, task.end, outputs + job.offset * stride, stride);
  });
  ctx.expert_products.Add(macs, bytes, watch.Seconds());
}

// Scratch of one wave: [rows, 2·width] gate/up, [rows, width] activations, [rows, D] expert outputs.
struct WaveBuffers {
  float* gate_up;
  float* act;
  float* expert_out;
  int64_t max_width;
};

// gate_up → SwiGLU → down for the jobs in `group` (their weights resident), outputs into the wave buffers.
void RunExperts(FastContext& ctx, std::vector<MoeJob>& jobs, std::span<const size_t> group, const WaveBuffers& b) {
  if (group.empty()) return;
  const int64_t d = ctx.config.hidden_size, max_width = b.max_width;
  RunPhase(
      ctx, jobs, group, [](const MoeJob& job) -> const PackedLinear& { return job.weights->gate_up; },
      [](const MoeJob& job) -> const QuantizedActivations& { return job.input; }, b.gate_up, 2 * max_width);
  int64_t rows = 0;
  for (size_t j : group) rows += static_cast<int64_t>(jobs[j].rows.size());
  const PassPart previous = ctx.profile.Enter(PassPart::kActivationQuant);  // SwiGLU fused with the quantization
  ctx.pool.RunIfWorthIt(
      static_cast<int64_t>(group.size()), rows * max_width * 2, kMinParallelElements, [&](int64_t i, int) {
        MoeJob& job = jobs[group[i]];
        const int64_t width = job.layout->down.cols();
        for (size_t r = 0; r < job.rows.size(); ++r) {
          const float* row = b.gate_up + (job.offset + r) * 2 * max_width;
          vec::SwiGlu(row, row + width, width, ctx.config.swiglu_limit, b.act + (job.offset + r) * max_width);
        }
        job.act = QuantizeActivations(ctx.i8, job.layout->down.ActivationGrouping(), b.act + job.offset * max_width,
                                      max_width, static_cast<int64_t>(job.rows.size()),
                                      ctx.ExpertActivations(2 * group[i] + 1));
      });
  ctx.profile.Leave(previous);
  RunPhase(
      ctx, jobs, group, [](const MoeJob& job) -> const PackedLinear& { return job.weights->down; },
      [](const MoeJob& job) -> const QuantizedActivations& { return job.act; }, b.expert_out, d);
}

// The products of wave [begin, end): everything at once when all is resident; with a store, the shared expert and
// the resident experts first, then each group of experts that has landed, released as soon as it is done.
Status RunWave(FastContext& ctx, std::vector<MoeJob>& jobs, size_t begin, size_t end, size_t routed_jobs,
               const WaveBuffers& buffers) {
  std::vector<size_t> group;
  if (ctx.experts == nullptr) {
    for (size_t j = begin; j < end; ++j) group.push_back(j);
    RunExperts(ctx, jobs, group, buffers);
    return Status::Ok();
  }
  for (size_t j = std::max(begin, routed_jobs); j < end; ++j) group.push_back(j);  // shared
  const size_t routed_end = std::min(end, routed_jobs);
  size_t handed_out = 0;
  for (bool wait = false;; wait = true) {
    std::vector<size_t> ready;
    std::vector<std::pair<size_t, Status>> failed;
    if (begin < routed_end) GLINT_RETURN_IF_ERROR(ctx.experts->NextReady(begin, routed_end, ready, failed, wait));
    for (const auto& [j, error] : failed) {  // only the rows routed to the expert are lost (their sequences fail)
      if (ctx.row_errors.empty()) return error;
      jobs[j].failed = true;
      for (int64_t row : jobs[j].rows) {
        if (ctx.row_errors[row].ok()) ctx.row_errors[row] = error;
      }
    }
    for (size_t j : ready) jobs[j].weights = &ctx.experts->Weights(j);
    group.insert(group.end(), ready.begin(), ready.end());
    RunExperts(ctx, jobs, group, buffers);
    for (size_t j : ready) ctx.experts->Release(j);
    handed_out += ready.size() + failed.size();
    group.clear();
    if (begin >= routed_end || handed_out == routed_end - begin) return Status::Ok();
  }
}

// Waves of whole jobs with at most kMoeWaveRows rows (a single job may exceed it alone): the end of the wave that
// starts at `begin`, each job's offset in the wave buffers set, and the wave's rows.
std::pair<size_t, int64_t> NextWave(std::vector<MoeJob>& jobs, size_t begin) {
  size_t end = begin;
  int64_t total_rows = 0;
  while (end < jobs.size() &&
         (end == begin || total_rows + static_cast<int64_t>(jobs[end].rows.size()) <= kMoeWaveRows)) {
    jobs[end].offset = total_rows;
    total_rows += static_cast<int64_t>(jobs[end].rows.size());
    ++end;
  }
  return {end, total_rows};
}

// out[t] += Σ weight · expert output over the wave's jobs, per row in job order (ascending expert id, shared last);
// rows split over the threads. expert_out [wave rows, D].
void CombineWave(FastContext& ctx, const std::vector<MoeJob>& jobs, size_t begin, size_t end, int64_t total_rows,
                 int64_t n, const float* expert_out, float* out) {
  const int64_t d = ctx.config.hidden_size;
  std::vector<std::vector<std::pair<int64_t, float>>> contributions(n);  // per output row: (wave row, weight)
  for (size_t j = begin; j < end; ++j) {
    if (jobs[j].failed) continue;
    for (size_t r = 0; r < jobs[j].rows.size(); ++r) {
      contributions[jobs[j].rows[r]].push_back({jobs[j].offset + static_cast<int64_t>(r), jobs[j].row_weights[r]});
    }
  }
  ctx.pool.RunIfWorthIt(n, total_rows * d, kMinParallelElements, [&](int64_t t, int) {
    for (const auto& [row, weight] : contributions[t]) vec::Axpy(weight, expert_out + row * d, d, out + t * d);
  });
}

// The routed jobs' weights: resident (bound) without a store; with one, every missing expert requested now.
Status BeginExperts(FastContext& ctx, const FastMoeWeights& w, std::vector<MoeJob>& jobs,
                    const std::vector<int32_t>& expert_ids) {
  if (ctx.experts == nullptr) {
    for (size_t j = 0; j < expert_ids.size(); ++j) jobs[j].weights = jobs[j].layout;
    return Status::Ok();
  }
  std::vector<int64_t> expert_rows;
  for (size_t j = 0; j < expert_ids.size(); ++j) expert_rows.push_back(static_cast<int64_t>(jobs[j].rows.size()));
  return ctx.experts->Begin(w, expert_ids, expert_rows);
}

// --expert-prefetch next-layer: the experts the next MoE layer's router picks for this layer's MoE input h [n, D]
// (rows that failed excluded, only those this rank holds), asked of the store once this pass has ended. A guess:
// the next layer's router really sees h after one more attention sublayer.
void PrefetchNextLayer(FastContext& ctx, const FastMoeWeights& next, const float* h, int64_t n,
                       const LocalExperts& local) {
  std::vector<RouterChoice> unfailed;
  const std::vector<RouterChoice> guessed = Route(ctx, next, h, n, {});
  std::vector<bool> wanted(next.experts.size(), false);
  for (const RouterChoice& row : WithoutFailedRows(ctx, guessed, unfailed)) {
    for (int32_t e : row.experts) wanted[e] = wanted[e] || local.routed.Holds(e);
  }
  std::vector<int32_t> experts;
  for (size_t e = 0; e < wanted.size(); ++e) {
    if (wanted[e]) experts.push_back(static_cast<int32_t>(e));
  }
  ctx.experts->Prefetch(next, experts);
}

}  // namespace

std::vector<RouterChoice> RouteMoe(FastContext& ctx, const FastMoeWeights& w, const float* h, int64_t n,
                                   std::span<const RouterChoice* const> forced) {
  return Route(ctx, w, h, n, forced);
}

Status FastMoe(FastContext& ctx, const FastMoeWeights& w, const float* h, int64_t n,
               std::span<const RouterChoice* const> forced, float* out, std::vector<RouterChoice>* choices,
               int64_t* experts_active, const LocalExperts& local) {
  if (!forced.empty() && static_cast<int64_t>(forced.size()) != n) {
    return InvalidArgument("FastMoe: forced choices for ", forced.size(), " rows, the pass has ", n);
  }
  std::vector<RouterChoice> routed = Route(ctx, w, h, n, forced);
  GLINT_RETURN_IF_ERROR(FastMoeRouted(ctx, w, h, n, routed, out, experts_active, local));
  if (choices != nullptr) *choices = std::move(routed);
  return Status::Ok();
}

Status FastMoeRouted(FastContext& ctx, const FastMoeWeights& w, const float* h, int64_t n,
                     const std::vector<RouterChoice>& routed, float* out, int64_t* experts_active,
                     const LocalExperts& local) {
  const int64_t d = ctx.config.hidden_size;
  std::vector<int32_t> expert_ids;
  std::vector<RouterChoice> unfailed;
  const ScopedPart routing(ctx.profile, PassPart::kMoeRouting);  // grouping, gathering and combining rows
  std::vector<MoeJob> jobs = GroupByExpert(w, WithoutFailedRows(ctx, routed, unfailed), local, expert_ids);
  const size_t routed_jobs = expert_ids.size();
  if (experts_active != nullptr) *experts_active = static_cast<int64_t>(routed_jobs);
  GLINT_RETURN_IF_ERROR(BeginExperts(ctx, w, jobs, expert_ids));
  struct EndPass {
    ExpertStore* store;
    void operator()() {
      if (store != nullptr) store->End();
      store = nullptr;
    }
    ~EndPass() { (*this)(); }
  } end_pass{ctx.experts};
  int64_t max_width = 0;
  for (const MoeJob& job : jobs) max_width = std::max(max_width, job.layout->down.cols());
  std::fill(out, out + n * d, 0.0f);
  ctx.ExpertActivations(2 * static_cast<int64_t>(jobs.size()) + 1);  // grown here, not inside parallel tasks
  const QuantizedActivations quantized_input = QuantizeMoeInput(ctx, jobs, h, n);
  for (size_t wave_begin = 0; wave_begin < jobs.size();) {
    const auto [wave_end, total_rows] = NextWave(jobs, wave_begin);
    const WaveBuffers buffers{ctx.act.moe.gate_up.Floats(total_rows * 2 * max_width),
                              ctx.act.moe.act.Floats(total_rows * max_width),
                              ctx.act.moe.expert_out.Floats(total_rows * d), max_width};
    {
      const ScopedPart part(ctx.profile, PassPart::kActivationQuant);  // the wave's rows gathered per job
      GatherInputs(ctx, jobs, wave_begin, wave_end, h, quantized_input, total_rows);
    }
    GLINT_RETURN_IF_ERROR(RunWave(ctx, jobs, wave_begin, wave_end, routed_jobs, buffers));
    CombineWave(ctx, jobs, wave_begin, wave_end, total_rows, n, buffers.expert_out, out);
    wave_begin = wave_end;
  }
  end_pass();  // this pass's experts are all released: only now may a prefetch take their slots
  if (ctx.experts != nullptr && ctx.prefetch_next != nullptr) PrefetchNextLayer(ctx, *ctx.prefetch_next, h, n, local);
  return Status::Ok();
}

}  // namespace glint

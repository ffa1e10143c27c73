// FastContext, the mHC sites and the FFN sublayers of the fast path (fast_layers.h).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/timer.h"
#include "kernels/linear.h"
#include "kernels/vector_ops.h"
#include "model/fast_layers.h"
#include "model/mhc.h"

namespace glint {

FastContext::FastContext(WorkerPool& pool, Isa isa, const ModelConfig& config)
    : pool(pool),
      i8(GetInt8Kernels(isa)),
      i4(GetInt4Kernels(isa)),
      bf16(GetBf16Kernels(isa)),
      config(config),
      worker_activations_(pool.size()),
      worker_floats_(pool.size()),
      buffers_(kNumFastBuffers) {}

float* FastContext::WorkerFloats(int worker, int64_t count) {
  std::vector<float>& buffer = worker_floats_[worker];
  if (static_cast<int64_t>(buffer.size()) < count) buffer.resize(count);
  return buffer.data();
}

float* FastContext::Buffer(int id, int64_t count) {
  std::vector<float>& buffer = buffers_[id];
  if (static_cast<int64_t>(buffer.size()) < count) buffer.resize(count);
  return buffer.data();
}

ActivationScratch& FastContext::ExpertActivations(int64_t index) {
  while (static_cast<int64_t>(expert_activations_.size()) <= index) {
    expert_activations_.push_back(std::make_unique<ActivationScratch>());
  }
  return *expert_activations_[index];
}

void FastContext::Linear(const PackedLinear& w, const float* x, int64_t x_stride, int64_t tokens, float* y,
                         int64_t y_stride) {
  weight_bytes_read += w.bytes();
  if (w.format == PackedLinear::Format::kInt8) {
    Stopwatch watch;
    LinearI8(pool, i8, w.int8, x, x_stride, tokens, y, y_stride, activations_);
    int8_seconds += watch.Seconds();
    int8_macs += static_cast<uint64_t>(w.rows() * w.cols() * tokens);
  } else if (w.format == PackedLinear::Format::kInt4) {
    Stopwatch watch;
    LinearI4(pool, i8, i4, w.int4, x, x_stride, tokens, y, y_stride, activations_);
    int8_seconds += watch.Seconds();
    int8_macs += static_cast<uint64_t>(w.rows() * w.cols() * tokens);
  } else {
    LinearBf16(pool, bf16, w.bf16, x, x_stride, tokens, y, y_stride);
  }
}

void FastContext::IntegerGemm(const PackedLinear& w, const QuantizedActivations& x, int64_t block_begin,
                              int64_t block_end, float* y, int64_t y_stride) const {
  if (w.format == PackedLinear::Format::kInt4) {
    i4.gemm(w.int4, x, block_begin, block_end, y, y_stride);
  } else {
    GLINT_CHECK(w.format == PackedLinear::Format::kInt8) << "an integer product needs int8 or int4 weights";
    i8.gemm(w.int8, x, block_begin, block_end, y, y_stride);
  }
}

void FastContext::LinearPerHead(const PackedLinear& w, int64_t heads, const float* x, int64_t x_stride,
                                int64_t x_head_offset, int64_t tokens, float* y, int64_t y_stride) {
  GLINT_CHECK(w.format == PackedLinear::Format::kInt8) << "per-head products are int8";
  weight_bytes_read += w.bytes();
  const int64_t blocks_per_head = w.int8.layout.row_blocks() / heads;
  // The head's input is only its cols: quantize that slice with the matrix's grouping.
  Int8Layout head_input = w.int8.layout;
  Stopwatch watch;
  pool.Run(heads, [&](int64_t h, int worker) {
    const QuantizedActivations q =
        QuantizeActivations(i8, head_input, x + h * x_head_offset, x_stride, tokens, worker_activations_[worker]);
    i8.gemm(w.int8, q, h * blocks_per_head, (h + 1) * blocks_per_head, y, y_stride);
  });
  int8_seconds += watch.Seconds();
  int8_macs += static_cast<uint64_t>(w.rows() * w.cols() * tokens);
}

// ---- mHC ----

void FastMhcRead(FastContext& ctx, const FastMhcWeights& w, const float* norm, const float* streams, int64_t n,
                 float* h, MhcTokenCoefficients* coefficients) {
  const ModelConfig& c = ctx.config;
  const int64_t hc = c.hc_mult, d = c.hidden_size, flat = hc * d, mix_rows = (2 + hc) * hc;
  ctx.weight_bytes_read += mix_rows * flat * sizeof(float);  // fn, read for every token but cached after the first
  ctx.pool.Run(n, [&](int64_t t, int) {
    const float* x = streams + t * flat;
    // r = (mean(xf²) + rms_norm_eps)^-1/2 (pitfall 5); mix = (fn · xf) · r.
    const double inverse_rms = 1.0 / std::sqrt(static_cast<double>(vec::SumSquares(x, flat)) / flat + c.rms_norm_eps);
    float dots[80];
    double mix[80];
    vec::DotRows(w.fn, mix_rows, flat, x, flat, dots);
    for (int64_t i = 0; i < mix_rows; ++i) mix[i] = dots[i] * inverse_rms;
    const MhcCoefficients coefficients_t = MhcCoefficientsFromMix(mix, w.base, w.scale, c);
    MhcTokenCoefficients& out = coefficients[t];
    std::copy(coefficients_t.pre.begin(), coefficients_t.pre.end(), out.pre);
    std::copy(coefficients_t.post.begin(), coefficients_t.post.end(), out.post);
    std::copy(coefficients_t.comb.begin(), coefficients_t.comb.end(), out.comb);
    // Read and RMSNorm fused per token: the collapsed row is normalised while it is still in L1.
    vec::MhcRead(x, out.pre, hc, d, h + t * d);
    vec::RmsNorm(h + t * d, norm, d, c.rms_norm_eps, h + t * d);
  });
}

void FastMhcWrite(FastContext& ctx, const MhcTokenCoefficients* coefficients, const float* y, int64_t n,
                  float* streams) {
  const int64_t hc = ctx.config.hc_mult, d = ctx.config.hidden_size;
  ctx.pool.Run(n, [&](int64_t t, int) {
    vec::MhcWrite(coefficients[t].post, coefficients[t].comb, y + t * d, hc, d, streams + t * hc * d);
  });
}

// ---- FFN ----

void FastMlp(FastContext& ctx, const FastMlpWeights& w, const float* h, int64_t n, float* out) {
  const int64_t d = ctx.config.hidden_size, width = w.down.cols();
  float* gate_up = ctx.Buffer(kBufMlpGateUp, n * 2 * width);  // [n, 2·width]: gate, then up
  float* act = ctx.Buffer(kBufMlpAct, n * width);             // [n, width]
  ctx.Linear(w.gate_up, h, d, n, gate_up, 2 * width);
  ctx.pool.Run(n, [&](int64_t t, int) {
    vec::SwiGlu(gate_up + t * 2 * width, gate_up + t * 2 * width + width, width, ctx.config.swiglu_limit,
                act + t * width);
  });
  ctx.Linear(w.down, act, width, n, out, d);
}

void FastMoe(FastContext& ctx, const FastMoeWeights& w, const float* h, int64_t n,
             const std::function<const RouterChoice*(int64_t row)>& forced_of, float* out,
             std::vector<RouterChoice>* choices, int64_t* experts_active, const LocalExperts& local) {
  const ModelConfig& c = ctx.config;
  const int64_t d = c.hidden_size, num_experts = c.n_routed_experts;
  // 1. Route every row (fp32 logits from exact bf16 router weights).
  float* logits = ctx.Buffer(kBufMoeLogits, n * num_experts);  // [n, E]
  ctx.Linear(w.router, h, d, n, logits, num_experts);
  std::vector<RouterChoice> routed(n);
  for (int64_t t = 0; t < n; ++t) {
    const RouterChoice* forced = forced_of ? forced_of(t) : nullptr;
    if (forced != nullptr) {  // the fp32 path's experts, weighted by this path's own scores
      routed[t].experts = forced->experts;
      routed[t].weights = RouterWeights(logits + t * num_experts, forced->experts, c);
      routed[t].margin = forced->margin;
    } else {
      routed[t] = RouteFromLogits(logits + t * num_experts, w.bias, c);
    }
  }
  // 2. Group rows by expert; the shared expert takes every row.
  struct Job {
    const FastMlpWeights* weights;
    std::vector<int64_t> rows;      // pass rows
    std::vector<float> row_weights; // routing weight per row
    int64_t offset = 0;             // first row of this job in the gathered buffers
    QuantizedActivations input, act;
  };
  std::vector<Job> jobs;
  std::vector<int64_t> job_of_expert(num_experts, -1);
  for (int64_t t = 0; t < n; ++t) {
    for (size_t i = 0; i < routed[t].experts.size(); ++i) {
      const int32_t e = routed[t].experts[i];
      if (!local.routed.Holds(e)) continue;  // another rank computes it
      if (job_of_expert[e] < 0) {
        job_of_expert[e] = static_cast<int64_t>(jobs.size());
        jobs.push_back({&w.experts[e], {}, {}, 0, {}, {}});
      }
      jobs[job_of_expert[e]].rows.push_back(t);
      jobs[job_of_expert[e]].row_weights.push_back(routed[t].weights[i]);
    }
  }
  // Ascending expert id, the accumulation order of HF's index_add_ (§8.3); shared expert last.
  std::sort(jobs.begin(), jobs.end(), [&](const Job& a, const Job& b) { return a.weights < b.weights; });
  if (experts_active != nullptr) *experts_active = static_cast<int64_t>(jobs.size());
  for (const FastMlpWeights& shared : w.shared) {
    if (!local.shared) break;
    Job job{&shared, {}, {}, 0, {}, {}};
    for (int64_t t = 0; t < n; ++t) job.rows.push_back(t), job.row_weights.push_back(1.0f);
    jobs.push_back(std::move(job));
  }
  int64_t max_width = 0;
  for (const Job& job : jobs) max_width = std::max(max_width, job.weights->down.cols());
  std::fill(out, out + n * d, 0.0f);
  ctx.ExpertActivations(2 * static_cast<int64_t>(jobs.size()) + 1);  // grown here, not inside parallel tasks
  // Waves of whole jobs with at most kMoeWaveRows rows (a single job may exceed it alone).
  for (size_t wave_begin = 0; wave_begin < jobs.size();) {
    size_t wave_end = wave_begin;
    int64_t total_rows = 0;
    while (wave_end < jobs.size() &&
           (wave_end == wave_begin || total_rows + static_cast<int64_t>(jobs[wave_end].rows.size()) <= kMoeWaveRows)) {
      jobs[wave_end].offset = total_rows;
      total_rows += static_cast<int64_t>(jobs[wave_end].rows.size());
      ++wave_end;
    }
    // 3. Quantize each job's input rows straight from h (once per job, whatever the number of row tasks below).
    float* gate_up = ctx.Buffer(kBufMoeGateUp, total_rows * 2 * max_width);  // [rows, 2·width]
    float* act = ctx.Buffer(kBufMoeAct, total_rows * max_width);             // [rows, width]
    float* expert_out = ctx.Buffer(kBufMoeOut, total_rows * d);              // [rows, D]
    ctx.pool.RunIfWorthIt(static_cast<int64_t>(wave_end - wave_begin), total_rows * d, kMinParallelElements,
                          [&](int64_t i, int) {
      Job& job = jobs[wave_begin + i];
      const Int8Layout layout = job.weights->gate_up.ActivationGrouping();
      const int64_t rows = static_cast<int64_t>(job.rows.size()), padded = layout.padded_cols(), groups = layout.groups();
      ActivationScratch& scratch = ctx.ExpertActivations(2 * (wave_begin + i));
      scratch.Reserve(rows, padded, groups);
      for (int64_t r = 0; r < rows; ++r) {  // rows of h are scattered: quantize them one by one into place
        ctx.i8.quantize(h + job.rows[r] * d, d, 1, layout.cols, layout.group, padded, scratch.codes() + r * padded,
                        scratch.scales() + r * groups, scratch.bias_correction() + r * groups);
      }
      job.input = {rows, layout.cols, padded, layout.group, scratch.codes(), scratch.scales(), scratch.bias_correction()};
    });
    // 4. Products of every job in one parallel call per phase: tasks are (job, row-block range), so each expert's
    //    weights are read once for all of its rows, and experts spread over the threads.
    auto run_phase = [&](auto matrix_of, auto input_of, float* outputs, int64_t stride) {
      struct Task {
        size_t job;
        int64_t begin, end;
      };
      std::vector<Task> tasks;
      for (size_t j = wave_begin; j < wave_end; ++j) {
        const PackedLinear& m = matrix_of(jobs[j]);
        ctx.weight_bytes_read += m.bytes();
        ctx.int8_macs += static_cast<uint64_t>(m.rows() * m.cols() * static_cast<int64_t>(jobs[j].rows.size()));
        const int64_t blocks = (m.rows() + kInt8RowBlock - 1) / kInt8RowBlock;
        const int64_t grain = RowBlocksPerTask(blocks, ctx.pool.size(),
                                               kInt8RowBlock * m.cols() * static_cast<int64_t>(jobs[j].rows.size()));
        for (int64_t b = 0; b < blocks; b += grain) tasks.push_back({j, b, std::min(blocks, b + grain)});
      }
      Stopwatch watch;
      ctx.pool.Run(static_cast<int64_t>(tasks.size()), [&](int64_t i, int) {
        const Task& task = tasks[i];
        const Job& job = jobs[task.job];
        ctx.IntegerGemm(matrix_of(job), input_of(job), task.begin, task.end, outputs + job.offset * stride, stride);
      });
      ctx.int8_seconds += watch.Seconds();
    };
    run_phase([](const Job& job) -> const PackedLinear& { return job.weights->gate_up; },
              [](const Job& job) -> const QuantizedActivations& { return job.input; }, gate_up, 2 * max_width);
    ctx.pool.RunIfWorthIt(static_cast<int64_t>(wave_end - wave_begin), total_rows * max_width * 2,
                          kMinParallelElements, [&](int64_t i, int) {
      Job& job = jobs[wave_begin + i];
      const int64_t width = job.weights->down.cols();
      for (size_t r = 0; r < job.rows.size(); ++r) {
        const float* row = gate_up + (job.offset + r) * 2 * max_width;
        vec::SwiGlu(row, row + width, width, c.swiglu_limit, act + (job.offset + r) * max_width);
      }
      job.act = QuantizeActivations(ctx.i8, job.weights->down.ActivationGrouping(), act + job.offset * max_width, max_width,
                                    static_cast<int64_t>(job.rows.size()), ctx.ExpertActivations(2 * (wave_begin + i) + 1));
    });
    run_phase([](const Job& job) -> const PackedLinear& { return job.weights->down; },
              [](const Job& job) -> const QuantizedActivations& { return job.act; }, expert_out, d);
    // 5. Combine per row, jobs in order (ascending expert id, shared last); rows split over the threads.
    std::vector<std::vector<std::pair<int64_t, float>>> contributions(n);  // per output row: (wave row, weight)
    for (size_t j = wave_begin; j < wave_end; ++j) {
      for (size_t r = 0; r < jobs[j].rows.size(); ++r) {
        contributions[jobs[j].rows[r]].push_back({jobs[j].offset + static_cast<int64_t>(r), jobs[j].row_weights[r]});
      }
    }
    ctx.pool.RunIfWorthIt(n, total_rows * d, kMinParallelElements, [&](int64_t t, int) {
      for (const auto& [row, weight] : contributions[t]) vec::Axpy(weight, expert_out + row * d, d, out + t * d);
    });
    wave_begin = wave_end;
  }
  if (choices != nullptr) *choices = std::move(routed);
}

}  // namespace glint

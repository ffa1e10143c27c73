// Faults of the routed-expert cache (`--expert-memory`, docs/expert-cache.md "Faults"), injected through
// FastModelOptions::open_expert_reader: short reads, EIO (transient and persistent), slow reads, a read failing in
// the middle of a layer, and a container changed under the reader. Each failing call ends with an error naming the
// expert and the cause, only the sequences whose rows needed the expert fail (the others are bit-identical to a
// run without faults), the engine goes on serving, no pin is leaked and the cache is not poisoned.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/file.h"
#include "engine/engine_core.h"
#include "engine/sampling.h"
#include "engine_checks.h"
#include "expert_checks.h"
#include "fast/fast_model.h"
#include "io/weight_container.h"
#include "test_util.h"

namespace glint {
namespace {

using Tokens = std::vector<int32_t>;

// ---------------------------------------------------------------------------------------------------------------
// DirectFileReader on a plain file: the real short read and the real change detection
// ---------------------------------------------------------------------------------------------------------------

struct PageBuffer {
  explicit PageBuffer(size_t bytes)
      : data(static_cast<uint8_t*>(std::aligned_alloc(kExtentAlignment, bytes))), size(bytes) {}
  ~PageBuffer() { std::free(data); }
  std::span<uint8_t> span() { return {data, size}; }
  uint8_t* data;
  size_t size;
};

std::string WritePages(const std::string& dir, int pages, char fill) {
  const std::string path = JoinPath(dir, "extents.bin");
  EXPECT_OK(WriteFileAtomic(path, std::string(pages * kExtentAlignment, fill)));
  return path;
}

TEST(DirectFileReader, ReadsAlignedExtentsAndRefusesMisalignedOnes) {
  const std::string path = WritePages(testing::MakeTempDir("reader_ok"), 3, 'x');
  ASSERT_OK_AND_ASSIGN(auto reader, DirectFileReader::Open(path));
  PageBuffer buffer(2 * kExtentAlignment);
  ASSERT_OK(reader->Read(kExtentAlignment, buffer.span()));
  EXPECT_EQ(buffer.data[0], 'x');
  EXPECT_EQ(buffer.data[2 * kExtentAlignment - 1], 'x');
  EXPECT_ERROR_CONTAINS(reader->Read(100, buffer.span()), "4 KiB-aligned");
  EXPECT_ERROR_CONTAINS(reader->Read(0, buffer.span().subspan(0, 1000)), "4 KiB-aligned");
}

TEST(DirectFileReader, AReadPastTheEndIsAShortRead) {
  const std::string path = WritePages(testing::MakeTempDir("reader_short"), 3, 'x');
  ASSERT_OK_AND_ASSIGN(auto reader, DirectFileReader::Open(path));
  PageBuffer buffer(2 * kExtentAlignment);
  EXPECT_ERROR_CONTAINS(reader->Read(2 * kExtentAlignment, buffer.span()), "short read");
  EXPECT_ERROR_CONTAINS(reader->Read(8 * kExtentAlignment, buffer.span()), "the file ends early");
}

TEST(DirectFileReader, AFileChangedOrReplacedWhileInUseIsAnError) {
  const std::string dir = testing::MakeTempDir("reader_changed");
  const std::string path = WritePages(dir, 3, 'x');
  ASSERT_OK_AND_ASSIGN(auto reader, DirectFileReader::Open(path));
  PageBuffer buffer(kExtentAlignment);
  {  // grown in place (same inode): size and mtime differ
    std::FILE* file = std::fopen(path.c_str(), "ab");
    ASSERT_NE(file, nullptr);
    std::fputs("more", file);
    std::fclose(file);
  }
  EXPECT_ERROR_CONTAINS(reader->Read(0, buffer.span()), "changed while in use");
  ASSERT_OK_AND_ASSIGN(auto second, DirectFileReader::Open(path));
  WritePages(dir, 3, 'y');  // replaced by rename: the path names another inode
  EXPECT_ERROR_CONTAINS(second->Read(0, buffer.span()), "replaced or removed");
}

// ---------------------------------------------------------------------------------------------------------------
// FastModel with a fault-injecting reader
// ---------------------------------------------------------------------------------------------------------------

// Records the routed experts of every sequence: (hidden layer, expert) pairs; the MTP layer is layer -1.
class RoutingRecorder : public Trace {
 public:
  bool Wants(int) const override { return true; }
  void Floats(int, const std::string&, std::span<const float>, std::vector<int64_t>) override {}
  void Ints(int sequence, const std::string& name, std::span<const int32_t> values, std::vector<int64_t>) override {
    const size_t end = name.find(".moe_experts");
    if (end == std::string::npos) return;
    const int64_t layer = name.rfind("mtp.", 0) == 0 ? -1 : std::stoll(name.substr(6, end - 6));  // after "layer."
    for (int32_t expert : values) used[sequence].insert({layer, expert});
  }
  std::map<int, std::set<std::pair<int64_t, int64_t>>> used;
};

struct Shared {
  WorkerPool pool{2};
  std::string container;
  std::unique_ptr<FastModel> resident;
  testing::ExpertBudgets budgets;
};
Shared& Fixture() {
  static Shared* shared = [] {
    auto* s = new Shared();
    s->container = testing::ConvertToContainer(testing::TestDataPath("golden/tiny-sparse"), s->pool);
    s->resident = FastModel::Load(s->container, s->pool).value();
    s->budgets = testing::BudgetsOf(s->container, s->pool);
    return s;
  }();
  return *shared;
}

Tokens Prompt(int64_t sequence, int64_t begin, int64_t count) {
  const auto tokens = testing::GoldenOutputs("tiny-sparse").Tokens()[sequence];
  return Tokens(tokens.begin() + begin, tokens.begin() + begin + count);
}

// One prefill with logits for every position; the status of the call and of the entry.
struct Prefill {
  Status status, entry_error;
  std::vector<float> logits;
  bool broken = false;
};
Prefill RunPrefill(const FastModel& model, const Tokens& tokens) {
  SequenceState state = model.NewSequence();
  std::vector<EntryOutput> outputs;
  BatchEntry entry{tokens, &state, LogitsWanted::kAll, false};
  Prefill result;
  result.status = model.Forward({&entry, 1}, outputs);
  if (!outputs.empty()) result.entry_error = outputs[0].error, result.logits = outputs[0].logits;
  result.broken = state.broken;
  return result;
}

class ExpertFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    shared_ = &Fixture();
    ASSERT_FALSE(shared_->container.empty());
    prompt_ = Prompt(0, 0, 24);
    expected_ = RunPrefill(*shared_->resident, prompt_).logits;
  }
  std::unique_ptr<FastModel> Load(uint64_t budget, int readers = 4) {
    auto model =
        FastModel::Load(shared_->container, shared_->pool, testing::FaultyCacheOptions(budget, plan_, readers));
    EXPECT_TRUE(model.ok()) << model.status().ToString();
    return model.ok() ? std::move(model).value() : nullptr;
  }
  // Every routed expert of hidden layer `layer`.
  std::set<uint64_t> LayerOffsets(int64_t layer) const {
    std::set<uint64_t> offsets;
    for (int64_t e = 0; e < shared_->resident->config().n_routed_experts; ++e) {
      offsets.insert(testing::ExpertExtentOffset(shared_->container, layer, e));
    }
    return offsets;
  }
  int64_t FirstMoeLayer() const {
    const auto& kinds = shared_->resident->config().mlp_kinds;
    return std::find(kinds.begin(), kinds.end(), MlpKind::kMoe) - kinds.begin();
  }
  // The failed call left nothing pinned, and the cache serves a clean call exactly afterwards.
  void ExpectRecovered(FastModel& model) {
    EXPECT_EQ(model.expert_cache()->pinned_slots(), 0);
    {
      std::lock_guard<std::mutex> lock(plan_->mutex);
      plan_->failing_offsets.clear(), plan_->failing_once.clear();
    }
    plan_->fail_read_number = -1, plan_->short_reads = false;
    const Prefill again = RunPrefill(model, prompt_);
    ASSERT_OK(again.status);
    EXPECT_EQ(again.logits, expected_);
    EXPECT_EQ(model.expert_cache()->pinned_slots(), 0);
  }

  Shared* shared_ = nullptr;
  std::shared_ptr<testing::FaultPlan> plan_ = std::make_shared<testing::FaultPlan>();
  Tokens prompt_;
  std::vector<float> expected_;
};

TEST_F(ExpertFaults, TransientErrorsAreRetriedOnceAndChangeNothing) {
  auto model = Load(shared_->budgets.minimum);
  ASSERT_NE(model, nullptr);
  for (int64_t l = 0; l < static_cast<int64_t>(shared_->resident->config().mlp_kinds.size()); ++l) {
    if (shared_->resident->config().mlp_kinds[l] != MlpKind::kMoe) continue;
    for (uint64_t offset : LayerOffsets(l)) plan_->failing_once.insert(offset);
  }
  const Prefill result = RunPrefill(*model, prompt_);
  ASSERT_OK(result.status);
  EXPECT_EQ(result.logits, expected_);
  const ExpertCacheStats stats = model->expert_cache()->stats();
  EXPECT_GT(stats.retried_reads, 0);
  EXPECT_EQ(stats.retried_reads, plan_->injected.load());
  EXPECT_EQ(stats.failed_reads, 0);
  EXPECT_EQ(model->expert_cache()->pinned_slots(), 0);
}

TEST_F(ExpertFaults, PersistentEioFailsTheCallWithTheExpertNamed) {
  auto model = Load(shared_->budgets.all);
  ASSERT_NE(model, nullptr);
  plan_->failing_offsets = LayerOffsets(FirstMoeLayer());  // whatever the router picks there fails
  const Prefill result = RunPrefill(*model, prompt_);
  EXPECT_ERROR_CONTAINS(result.status, "Input/output error");
  EXPECT_ERROR_CONTAINS(result.status, "read failed twice");
  EXPECT_ERROR_CONTAINS(result.entry_error, "routed expert");
  EXPECT_TRUE(result.broken);
  EXPECT_GT(model->expert_cache()->stats().failed_reads, 0);
  ExpectRecovered(*model);
}

TEST_F(ExpertFaults, ShortReadsFailTheCall) {
  auto model = Load(shared_->budgets.minimum * 3);
  ASSERT_NE(model, nullptr);
  plan_->short_reads = true;
  const Prefill result = RunPrefill(*model, prompt_);
  EXPECT_ERROR_CONTAINS(result.status, "short read");
  EXPECT_ERROR_CONTAINS(result.entry_error, "routed expert");
  EXPECT_TRUE(result.broken);
  ExpectRecovered(*model);
}

// Issue 37 item 3: an extent read back with other bytes than `glint convert` wrote (a file rewritten in place, size
// and mtime kept; a disk returning wrong data) reads "successfully": only its checksum tells. The call fails naming
// the extent, and the cache reports the container damaged for good (/health).
TEST_F(ExpertFaults, BytesThatFailTheExtentChecksumFailTheCallAndMarkTheContainerDamaged) {
  auto model = Load(shared_->budgets.all);
  ASSERT_NE(model, nullptr);
  ASSERT_OK(model->WeightsDamage());
  plan_->corrupt_offsets = LayerOffsets(FirstMoeLayer());
  const Prefill result = RunPrefill(*model, prompt_);
  EXPECT_ERROR_CONTAINS(result.status, "does not match its checksum");
  EXPECT_ERROR_CONTAINS(result.entry_error, "routed expert");
  EXPECT_TRUE(result.broken);
  EXPECT_GT(plan_->injected.load(), 0);
  EXPECT_GT(model->expert_cache()->stats().corrupt_reads, 0);
  EXPECT_ERROR_CONTAINS(model->WeightsDamage(), "re-run `glint convert`");
  {
    std::lock_guard<std::mutex> lock(plan_->mutex);
    plan_->corrupt_offsets.clear();
  }
  ExpectRecovered(*model);  // the bytes are right again: served, but the damage stays reported
  EXPECT_FALSE(model->WeightsDamage().ok());
}

TEST_F(ExpertFaults, SlowReadsGiveTheSameLogits) {
  plan_->sleep_microseconds = 2000;
  for (int readers : {1, 3}) {
    auto model = Load(shared_->budgets.minimum, readers);
    ASSERT_NE(model, nullptr);
    const Prefill result = RunPrefill(*model, prompt_);
    ASSERT_OK(result.status);
    EXPECT_EQ(result.logits, expected_);
    EXPECT_EQ(model->expert_cache()->pinned_slots(), 0);
  }
}

// The k-th read fails (and its retry): a layer with some experts computed, some landed, some still queued.
TEST_F(ExpertFaults, AReadFailingInTheMiddleOfALayerFailsOnlyThatCall) {
  for (int64_t k : {1, 6, 13}) {
    plan_->reads = 0;
    plan_->fail_read_number = k;
    auto model = Load(shared_->budgets.minimum, 3);
    ASSERT_NE(model, nullptr);
    const Prefill result = RunPrefill(*model, prompt_);
    SCOPED_TRACE(StrCat("read ", k));
    EXPECT_ERROR_CONTAINS(result.status, "routed expert");
    ExpectRecovered(*model);
  }
}

// The expert set each of two prompts' rows route to (on the resident model); an expert only the first uses.
std::pair<int64_t, int64_t> ExpertOnlyTheFirstUses(const FastModel& model, const Tokens& first, const Tokens& second) {
  RoutingRecorder trace;
  SequenceState a = model.NewSequence(), b = model.NewSequence();
  std::vector<BatchEntry> batch{{first, &a, LogitsWanted::kNone, false}, {second, &b, LogitsWanted::kNone, false}};
  std::vector<EntryOutput> outputs;
  EXPECT_OK(model.Forward(batch, outputs, {}, &trace));
  for (const auto& used : trace.used[0]) {
    if (trace.used[1].count(used) == 0) return used;
  }
  return {-1, -1};
}

TEST_F(ExpertFaults, InABatchOnlyTheEntriesThatNeededTheExpertFail) {
  const Tokens a = Prompt(0, 0, 3), b = Prompt(1, 0, 3);
  const auto [layer, expert] = ExpertOnlyTheFirstUses(*shared_->resident, a, b);
  ASSERT_GE(layer, 0) << "the two prompts route to the same experts: choose others";
  const std::vector<float> b_alone = RunPrefill(*shared_->resident, b).logits;
  auto model = Load(shared_->budgets.minimum);
  ASSERT_NE(model, nullptr);
  plan_->failing_offsets = {testing::ExpertExtentOffset(shared_->container, layer, expert)};
  SequenceState sa = model->NewSequence(), sb = model->NewSequence();
  std::vector<BatchEntry> batch{{a, &sa, LogitsWanted::kAll, false}, {b, &sb, LogitsWanted::kAll, false}};
  std::vector<EntryOutput> outputs;
  const Status status = model->Forward(batch, outputs);
  EXPECT_ERROR_CONTAINS(status, "1 of 2 entries failed");
  ASSERT_EQ(outputs.size(), 2u);
  EXPECT_ERROR_CONTAINS(outputs[0].error, StrCat("routed expert ", expert, " of layers.", layer, ".moe"));
  EXPECT_TRUE(sa.broken);
  ASSERT_OK(outputs[1].error);
  EXPECT_FALSE(sb.broken);
  EXPECT_EQ(outputs[1].logits, b_alone);
  EXPECT_EQ(sb.tokens, static_cast<int64_t>(b.size()));
  ExpectRecovered(*model);
}

// The engine: the request that needed the unreadable expert ends with the error; the one batched beside it and a
// later one are served exactly; nothing stays held.
TEST_F(ExpertFaults, TheEngineFailsOnlyTheRequestThatNeededTheExpert) {
  constexpr int64_t kGenerated = 6;
  const Tokens a = Prompt(0, 0, 3), b = Prompt(1, 0, 5);
  const testing::Tokens b_expected = testing::GreedyOracle(*shared_->resident, b, kGenerated);
  Tokens b_whole = b;  // b's whole run: its prompt and every generated token it feeds back
  b_whole.insert(b_whole.end(), b_expected.begin(), b_expected.end() - 1);
  const auto [layer, expert] = ExpertOnlyTheFirstUses(*shared_->resident, a, b_whole);
  ASSERT_GE(layer, 0) << "the two prompts route to the same experts: choose others";
  auto model = Load(shared_->budgets.minimum * 3);
  ASSERT_NE(model, nullptr);
  plan_->failing_offsets = {testing::ExpertExtentOffset(shared_->container, layer, expert)};
  auto core = testing::MakeCore(*model, testing::SizedOptions(*model, 3, 16, 0));
  ASSERT_NE(core, nullptr);
  auto sink = std::make_shared<testing::Collector>();
  ASSERT_OK(core->Add(1, testing::Greedy(a, kGenerated, sink)));
  ASSERT_OK(core->Add(2, testing::Greedy(b, kGenerated, sink)));
  testing::RunToCompletion(*core);
  const RequestOutput* failed = sink->Last(1);
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(failed->finish_reason, FinishReason::kError);
  EXPECT_NE(failed->error.find(StrCat("routed expert ", expert, " of layers.", layer, ".moe")), std::string::npos)
      << failed->error;
  EXPECT_EQ(sink->TokensOf(2), b_expected);
  EXPECT_EQ(sink->Last(2)->finish_reason, FinishReason::kLength);
  EXPECT_EQ(core->Metrics().finished_error, 1);
  // Still serving: a later request (the drive healthy again) is exact.
  plan_->failing_offsets.clear();
  ASSERT_OK(core->Add(3, testing::Greedy(a, kGenerated, sink)));
  testing::RunToCompletion(*core);
  EXPECT_EQ(sink->TokensOf(3), testing::GreedyOracle(*shared_->resident, a, kGenerated));
  testing::ExpectPoolsAtStart(*core);
  EXPECT_EQ(model->expert_cache()->pinned_slots(), 0);
}

}  // namespace
}  // namespace glint

namespace glint {
namespace {

// --expert-io uring: the same logits as every expert resident at the minimum budget (reads in flight from one
// thread), and a container changed under it is an error naming the change.
TEST_F(ExpertFaults, UringReaderGivesTheSameLogitsAndDetectsAChangedContainer) {
  const std::string copy = testing::MakeTempDir("expert_uring");
  for (const char* name : {kContainerFileName, "config.json"}) {
    ASSERT_OK_AND_ASSIGN(std::string bytes, ReadFile(JoinPath(shared_->container, name)));
    ASSERT_OK(WriteFileAtomic(JoinPath(copy, name), bytes));
  }
  FastModelOptions options;
  options.expert_memory = shared_->budgets.minimum;
  options.expert_io = ExpertIo::kUring;
  options.expert_readers = 8;
  // The ring's pages count in the budget: the pread minimum is refused, naming the read buffers.
  EXPECT_ERROR_CONTAINS(FastModel::Load(copy, shared_->pool, options), "bytes of read buffers");
  options.expert_memory = shared_->budgets.minimum + (uint64_t{64} << 10);  // a depth-8 ring is 3 pages
  ASSERT_OK_AND_ASSIGN(auto model, FastModel::Load(copy, shared_->pool, options));
  EXPECT_EQ(model->expert_cache()->io(), ExpertIo::kUring);
  const Prefill result = RunPrefill(*model, prompt_);
  ASSERT_OK(result.status);
  EXPECT_EQ(result.logits, expected_);
  EXPECT_EQ(model->expert_cache()->pinned_slots(), 0);
  std::FILE* file = std::fopen(JoinPath(copy, kContainerFileName).c_str(), "ab");
  ASSERT_NE(file, nullptr);
  std::fputs("appended", file);
  std::fclose(file);
  const Prefill changed = RunPrefill(*model, prompt_);
  EXPECT_ERROR_CONTAINS(changed.status, "changed while in use");
  EXPECT_ERROR_CONTAINS(changed.entry_error, "routed expert");
  EXPECT_EQ(model->expert_cache()->pinned_slots(), 0);
  // Injected readers go through the pread threads only.
  options.open_expert_reader = testing::FaultyCacheOptions(1, plan_).open_expert_reader;
  EXPECT_ERROR_CONTAINS(FastModel::Load(shared_->container, shared_->pool, options), "needs pread");
}

}  // namespace
}  // namespace glint

namespace glint {
namespace {

// The MTP layer's experts of a prompt's first step in the engine: its pairs (h_p, x_{p+1}) for every prompt
// position, x after the last being the greedy token.
std::set<int64_t> MtpExpertsOfPrefill(const FastModel& model, const Tokens& prompt) {
  SequenceState state = model.NewSequence();
  std::vector<EntryOutput> outputs;
  BatchEntry entry{prompt, &state, LogitsWanted::kLast, true};
  EXPECT_OK(model.Forward({&entry, 1}, outputs));
  Tokens next(prompt.begin() + 1, prompt.end());
  next.push_back(ArgMax(outputs[0].logits));
  RoutingRecorder trace;
  std::vector<float> logits;
  EXPECT_OK(model.MtpForward(state, outputs[0].hidden, next, logits, {}, &trace));
  std::set<int64_t> experts;
  for (const auto& [layer, expert] : trace.used[0]) experts.insert(expert);
  return experts;
}

// With --speculative mtp the MTP layer reads experts too: a request whose MTP pass needs the unreadable expert
// ends with the error, the one beside it in the step is served exactly, and the engine goes on.
TEST_F(ExpertFaults, AnMtpReadFailureFailsOnlyThatRequest) {
  const Tokens a = Prompt(0, 0, 3), b = Prompt(1, 0, 5);
  const std::set<int64_t> a_experts = MtpExpertsOfPrefill(*shared_->resident, a);
  const std::set<int64_t> b_experts = MtpExpertsOfPrefill(*shared_->resident, b);
  int64_t expert = -1;
  for (int64_t e : a_experts) expert = expert < 0 && b_experts.count(e) == 0 ? e : expert;
  ASSERT_GE(expert, 0) << "the two prompts' MTP passes route to the same experts: choose others";
  auto model = Load(shared_->budgets.minimum * 3);
  ASSERT_NE(model, nullptr);
  plan_->failing_offsets = {testing::ExpertExtentOffset(shared_->container, -1, expert)};
  auto core = testing::MakeCore(*model, testing::SizedOptions(*model, 3, 16, 0, /*speculative=*/true));
  ASSERT_NE(core, nullptr);
  auto sink = std::make_shared<testing::Collector>();
  ASSERT_OK(core->Add(1, testing::Greedy(a, 1, sink)));  // one token each: the first step is their whole run
  ASSERT_OK(core->Add(2, testing::Greedy(b, 1, sink)));
  testing::RunToCompletion(*core);
  ASSERT_NE(sink->Last(1), nullptr);
  EXPECT_EQ(sink->Last(1)->finish_reason, FinishReason::kError);
  EXPECT_NE(sink->Last(1)->error.find(StrCat("routed expert ", expert, " of mtp.moe")), std::string::npos)
      << sink->Last(1)->error;
  EXPECT_EQ(sink->TokensOf(2), testing::GreedyOracle(*shared_->resident, b, 1));
  EXPECT_EQ(sink->Last(2)->finish_reason, FinishReason::kLength);
  plan_->failing_offsets.clear();
  ASSERT_OK(core->Add(3, testing::Greedy(a, 4, sink)));
  testing::RunToCompletion(*core);
  EXPECT_EQ(sink->TokensOf(3), testing::GreedyOracle(*shared_->resident, a, 4));
  testing::ExpectPoolsAtStart(*core);
  EXPECT_EQ(model->expert_cache()->pinned_slots(), 0);
}

}  // namespace
}  // namespace glint

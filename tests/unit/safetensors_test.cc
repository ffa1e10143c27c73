#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "base/file.h"
#include "test_util.h"

namespace glint {
namespace {

std::span<const uint8_t> Bytes(const std::string& text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

// Builds a file from a raw JSON header and a data section.
std::string RawFile(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  out += header;
  out.append(data_bytes, '\0');
  return out;
}

TEST(Safetensors, WriteThenReadRoundTrips) {
  SafetensorsWriter writer;
  const float values[] = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f};
  const int32_t ids[] = {4, 5, 6};
  ASSERT_OK(writer.AddF32("a.weight", {2, 3}, values));
  ASSERT_OK(writer.AddI32("ids", {3}, ids));
  writer.SetMetadata("format", "pt");
  const std::string bytes = writer.Serialize();
  ASSERT_OK_AND_ASSIGN(SafetensorsHeader header, ParseSafetensorsHeader(Bytes(bytes)));
  ASSERT_EQ(header.tensors.size(), 2u);
  EXPECT_EQ(header.metadata.at("format"), "pt");
  EXPECT_EQ(header.data_offset % 8, 0u);

  const std::string dir = testing::MakeTempDir("st");
  ASSERT_OK(writer.WriteTo(dir + "/model.safetensors"));
  ASSERT_OK_AND_ASSIGN(Checkpoint checkpoint, Checkpoint::Open(dir));
  ASSERT_OK_AND_ASSIGN(TensorView view, checkpoint.View("a.weight"));
  EXPECT_EQ(view.dtype(), DType::kF32);
  EXPECT_EQ(view.shape(), (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(view.As<float>().size(), 6u);
  EXPECT_EQ(view.As<float>()[2], 3.25f);
  ASSERT_OK_AND_ASSIGN(TensorView id_view, checkpoint.View("ids"));
  EXPECT_EQ(id_view.As<int32_t>()[1], 5);
  EXPECT_ERROR_CONTAINS(checkpoint.View("missing"), "'missing' is not in the checkpoint");
}

TEST(Safetensors, RejectsMalformedHeaders) {
  struct Case {
    std::string header;
    size_t data;
    std::string expected;
  };
  const Case cases[] = {
      {"not json", 0, "not valid JSON"},
      {"[1,2]", 0, "not a JSON object"},
      {R"({"t":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", 4, "unsupported dtype 'F33'"},
      {R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4, "needs 8 bytes but data_offsets cover 4"},
      {R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", 4, "past the data section"},
      {R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4, "begin 4 > end 0"},
      {R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4, "non-negative integers"},
      {R"({"t":{"dtype":"F32","shape":[1]}})", 4, "data_offsets"},
      {R"({"t":{"shape":[1],"data_offsets":[0,4]}})", 4, "missing string field 'dtype'"},
      {R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", 4, "unknown field 'x'"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       8, "overlapping"},
      {R"({"__metadata__":{"k":1}})", 0, "not a string"},
      {R"({"t":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,4]}})", 4, "overflows"},
  };
  for (const Case& c : cases) {
    const std::string file = RawFile(c.header, c.data);
    EXPECT_ERROR_CONTAINS(ParseSafetensorsHeader(Bytes(file)), c.expected);
  }
  EXPECT_ERROR_CONTAINS(ParseSafetensorsHeader(Bytes("abc")), "too short");
  std::string huge_length(8, '\xff');
  EXPECT_ERROR_CONTAINS(ParseSafetensorsHeader(Bytes(huge_length)), "above the limit");
  std::string past_end = RawFile("{}", 0);
  past_end[0] = 100;
  EXPECT_ERROR_CONTAINS(ParseSafetensorsHeader(Bytes(past_end)), "runs past the end");
  // 300,000 nested arrays overflowed the stack (issue 18, finding 7): refused with a clear error instead.
  const std::string deep = "{\"__metadata__\":" + std::string(300000, '[') + std::string(300000, ']') + "}";
  EXPECT_ERROR_CONTAINS(ParseSafetensorsHeader(Bytes(RawFile(deep, 0))), "nested more than 64 levels");
}

TEST(Safetensors, ShardedCheckpointIsValidated) {
  const std::string dir = testing::MakeTempDir("shards");
  const float one[] = {1.0f};
  SafetensorsWriter first, second;
  ASSERT_OK(first.AddF32("x", {1}, one));
  ASSERT_OK(second.AddF32("y", {1}, one));
  ASSERT_OK(first.WriteTo(dir + "/model-00001-of-00002.safetensors"));
  ASSERT_OK(second.WriteTo(dir + "/model-00002-of-00002.safetensors"));
  ASSERT_OK(WriteFileAtomic(dir + "/model.safetensors.index.json",
                            R"({"metadata":{},"weight_map":{"x":"model-00001-of-00002.safetensors",
                                "y":"model-00002-of-00002.safetensors"}})"));
  ASSERT_OK_AND_ASSIGN(Checkpoint checkpoint, Checkpoint::Open(dir));
  EXPECT_EQ(checkpoint.tensors().size(), 2u);
  EXPECT_EQ(checkpoint.shard_paths().size(), 2u);
  ASSERT_OK_AND_ASSIGN(TensorView y, checkpoint.View("y"));
  EXPECT_EQ(y.As<float>()[0], 1.0f);

  // Index naming a tensor that is not in its shard.
  ASSERT_OK(WriteFileAtomic(dir + "/model.safetensors.index.json",
                            R"({"weight_map":{"x":"model-00001-of-00002.safetensors",
                                "y":"model-00001-of-00002.safetensors"}})"));
  EXPECT_ERROR_CONTAINS(Checkpoint::Open(dir), "places tensor 'y' in this shard");
  // Index naming a missing shard.
  ASSERT_OK(WriteFileAtomic(dir + "/model.safetensors.index.json", R"({"weight_map":{"x":"nope.safetensors"}})"));
  EXPECT_ERROR_CONTAINS(Checkpoint::Open(dir), "shard 'nope.safetensors'");
  // A shard path escaping the directory.
  ASSERT_OK(WriteFileAtomic(dir + "/model.safetensors.index.json", R"({"weight_map":{"x":"../x.safetensors"}})"));
  EXPECT_ERROR_CONTAINS(Checkpoint::Open(dir), "expected a file name in the same directory");
  ASSERT_OK(WriteFileAtomic(dir + "/model.safetensors.index.json", R"({"weight_map":[]})"));
  EXPECT_ERROR_CONTAINS(Checkpoint::Open(dir), "missing object 'weight_map'");
  EXPECT_ERROR_CONTAINS(Checkpoint::Open(dir + "/does-not-exist"), "No such file");
  const std::string empty_dir = testing::MakeTempDir("empty");
  EXPECT_ERROR_CONTAINS(Checkpoint::Open(empty_dir), "neither model.safetensors.index.json");
}

TEST(Safetensors, TruncatedGoldenFileIsAnErrorNotACrash) {
  ASSERT_OK_AND_ASSIGN(std::string bytes, ReadFile(testing::TestDataPath("golden/tiny-dense/model.safetensors")));
  ASSERT_OK(ParseSafetensorsHeader(Bytes(bytes)).status());
  // Cutting the file anywhere must give a clear error: first inside the data, then inside the header.
  for (size_t keep : {bytes.size() - 1, bytes.size() / 2, size_t{100}, size_t{7}}) {
    auto result = ParseSafetensorsHeader(Bytes(bytes.substr(0, keep)));
    EXPECT_FALSE(result.ok()) << "kept " << keep << " bytes";
  }
}

TEST(Safetensors, OpensTheGoldenCheckpoint) {
  ASSERT_OK_AND_ASSIGN(Checkpoint checkpoint, Checkpoint::Open(testing::TestDataPath("golden/tiny-sparse")));
  const TensorInfo* scale = checkpoint.Find("model.language_model.layers.0.mlp.gate_proj.weight_scale_inv");
  ASSERT_NE(scale, nullptr);
  EXPECT_EQ(scale->dtype, DType::kF32);
  EXPECT_EQ(scale->shape, (std::vector<int64_t>{2, 1}));  // 192-wide dense MLP: two row blocks, one partial
}

}  // namespace
}  // namespace glint

// The safetensors reader: the golden fixtures, exact round trips of files we write, and one
// clear error for each way a file can be corrupt.
#include <gtest/gtest.h>

#include <unistd.h>

#include <bit>
#include <cmath>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "amk/safetensors.h"
#include "support/safetensors_writer.h"

namespace amk {
namespace {

namespace fs = std::filesystem;
using testing::f16_exact;
using testing::bf16_exact;
using testing::raw_safetensors;
using testing::safetensors_bytes;
using testing::StTensor;

const fs::path kFixtures = fs::path(AMK_TESTDATA_DIR) / "fixtures";

// A scratch folder per test, removed afterwards.
class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("amk_st_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write(const std::vector<uint8_t>& bytes, const std::string& name = "model.safetensors") {
    const fs::path p = dir_ / name;
    testing::write_bytes(p, bytes);
    return p;
  }

  // Opening `bytes` must fail with a message naming the file and containing `needle`.
  void expect_error(const std::vector<uint8_t>& bytes, const std::string& needle) {
    const fs::path p = write(bytes);
    try {
      SafetensorsFile::open(p);
      ADD_FAILURE() << "opened a corrupt file; expected an error containing: " << needle;
    } catch (const SafetensorsError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(p.string() + ": "), std::string::npos) << msg;
      EXPECT_NE(msg.find(needle), std::string::npos) << "message: " << msg << "\nwanted: " << needle;
    }
  }

  fs::path dir_;
};

std::string header_of(const std::string& tensors_json) { return "{" + tensors_json + "}"; }

// ---- dtypes ----------------------------------------------------------------------------------------

TEST(SafetensorsDType, NamesAndSizes) {
  const std::pair<const char*, int64_t> all[] = {{"F64", 8}, {"F32", 4},  {"F16", 2},    {"BF16", 2},
                                                 {"I64", 8}, {"I32", 4},  {"I16", 2},    {"I8", 1},
                                                 {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  for (const auto& [name, size] : all) {
    const auto t = parse_st_dtype(name);
    ASSERT_TRUE(t.has_value()) << name;
    EXPECT_EQ(name_of(*t), name);
    EXPECT_EQ(itemsize(*t), size) << name;
  }
  EXPECT_FALSE(parse_st_dtype("f32").has_value());
  EXPECT_FALSE(parse_st_dtype("F8_E8M0").has_value());
  EXPECT_FALSE(parse_st_dtype("").has_value());
}

// ---- the golden fixtures ----------------------------------------------------------------------------

TEST(SafetensorsFixtures, BothModelsOpenAndEveryTensorIsReadable) {
  for (const char* model : {"tiny-llama", "tiny-qwen3"}) {
    SCOPED_TRACE(model);
    const SafetensorsFile f = SafetensorsFile::open(kFixtures / model / "model.safetensors");
    EXPECT_EQ(f.metadata(), (std::vector<std::pair<std::string, std::string>>{{"format", "pt"}}));
    ASSERT_FALSE(f.tensors().empty());
    for (const TensorView& t : f.tensors()) {
      EXPECT_EQ(t.dtype, StDType::F32) << t.name;
      const std::vector<float> v = t.to_floats();
      ASSERT_EQ(static_cast<int64_t>(v.size()), t.numel()) << t.name;
      for (const float x : v) ASSERT_TRUE(std::isfinite(x)) << t.name;
      EXPECT_EQ(t.float_at(t.numel() - 1), v.back());
    }
    EXPECT_EQ(f.at("model.embed_tokens.weight").shape, (std::vector<int64_t>{256, 64}));
    EXPECT_EQ(f.at("model.norm.weight").shape, (std::vector<int64_t>{64}));
  }
  const SafetensorsFile llama = SafetensorsFile::open(kFixtures / "tiny-llama" / "model.safetensors");
  EXPECT_EQ(llama.tensors().size(), 2u + 2u * 9u + 1u);
  EXPECT_EQ(llama.at("model.layers.1.self_attn.k_proj.weight").shape, (std::vector<int64_t>{32, 64}));
  const SafetensorsFile qwen = SafetensorsFile::open(kFixtures / "tiny-qwen3" / "model.safetensors");
  EXPECT_EQ(qwen.find("lm_head.weight"), nullptr);  // tied
  EXPECT_EQ(qwen.at("model.layers.0.self_attn.q_proj.weight").shape, (std::vector<int64_t>{128, 64}));
  EXPECT_EQ(qwen.at("model.layers.0.self_attn.q_norm.weight").shape, (std::vector<int64_t>{32}));
}

TEST(SafetensorsFixtures, NormWeightsArePerturbedAwayFromOne) {
  // The fixture README promises this; a reader returning a constant would pass other tests.
  const SafetensorsFile f = SafetensorsFile::open(kFixtures / "tiny-llama" / "model.safetensors");
  const std::vector<float> norm = f.at("model.norm.weight").to_floats();
  int not_one = 0;
  for (const float x : norm) not_one += x != 1.0f;
  EXPECT_GT(not_one, 32);
}

TEST(SafetensorsFixtures, ExpectedOutputsHaveTheDocumentedTypesAndShapes) {
  for (const char* model : {"tiny-llama", "tiny-qwen3"}) {
    SCOPED_TRACE(model);
    const SafetensorsFile f = SafetensorsFile::open(kFixtures / model / "expected.safetensors");
    const TensorView& prompt = f.at("prompt_ids");
    const TensorView& seq = f.at("sequence_ids");
    const TensorView& logits = f.at("logits");
    EXPECT_EQ(prompt.dtype, StDType::I64);
    EXPECT_EQ(seq.dtype, StDType::I64);
    EXPECT_EQ(logits.dtype, StDType::F32);
    EXPECT_EQ(prompt.shape, (std::vector<int64_t>{12}));  // expected.json: prompt_len 12
    EXPECT_EQ(seq.shape, (std::vector<int64_t>{52}));     // + gen_len 40
    EXPECT_EQ(logits.shape, (std::vector<int64_t>{52, 256}));

    const std::vector<int64_t> p = prompt.to_ints();
    const std::vector<int64_t> s = seq.to_ints();
    ASSERT_EQ(s.size(), 52u);
    for (size_t i = 0; i < p.size(); ++i) EXPECT_EQ(s[i], p[i]) << "sequence starts with the prompt";
    for (const int64_t id : s) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, 256);
    }
    // Greedy continuation: each generated token is the argmax of the previous row's logits.
    const std::vector<float> l = logits.to_floats();
    for (size_t pos = p.size() - 1; pos + 1 < s.size(); ++pos) {
      const float* row = l.data() + pos * 256;
      const int64_t argmax = std::max_element(row, row + 256) - row;
      EXPECT_EQ(argmax, s[pos + 1]) << "position " << pos;
    }
    EXPECT_THROW(logits.to_ints(), SafetensorsError);
    EXPECT_THROW(prompt.float_at(0), SafetensorsError);
  }
}

// ---- round trips of files we write --------------------------------------------------------------------

TEST_F(SafetensorsTest, FloatTypesRoundTripExactly) {
  const float denorm32 = std::numeric_limits<float>::denorm_min();
  const std::vector<float> f32 = {0.0f, -0.0f, 1.0f, -2.5f, 3.14159274f, 1e-30f, denorm32, 3.4e38f,
                                  std::numeric_limits<float>::infinity()};
  const std::vector<float> f16 = {0.0f, -0.0f, 1.0f, -1.5f, 65504.0f, 0.099975586f,
                                  std::ldexp(1.0f, -14), std::ldexp(1.0f, -24), std::ldexp(1023.0f, -24),
                                  -std::numeric_limits<float>::infinity()};
  const std::vector<float> bf16 = {0.0f, -1.0f, 0.5f, 3.140625f, -std::ldexp(1.5f, 100), std::ldexp(1.0f, -133),
                                   std::numeric_limits<float>::infinity()};
  std::vector<uint16_t> f16_bits, bf16_bits;
  for (const float v : f16) f16_bits.push_back(f16_exact(v));
  for (const float v : bf16) bf16_bits.push_back(bf16_exact(v));
  const std::vector<double> f64 = {1.0 / 3.0, -1e300};

  const fs::path p = write(safetensors_bytes(
      {{"a.f32", "F32", {3, 3}, testing::f32_bytes(f32)},
       {"b.f16", "F16", {10}, testing::u16_bytes(f16_bits)},
       {"c.bf16", "BF16", {7, 1}, testing::u16_bytes(bf16_bits)},
       {"d.f64", "F64", {2}, testing::le_bytes(f64)}},
      {{"format", "pt"}, {"note", "written by the test"}}));
  const SafetensorsFile f = SafetensorsFile::open(p);

  const auto same = [](const std::vector<float>& got, const std::vector<float>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
          << "element " << i << ": " << got[i] << " vs " << want[i];
  };
  same(f.at("a.f32").to_floats(), f32);
  same(f.at("b.f16").to_floats(), f16);
  same(f.at("c.bf16").to_floats(), bf16);
  EXPECT_EQ(f.at("d.f64").float_at(0), 1.0 / 3.0);
  EXPECT_EQ(f.at("d.f64").float_at(1), -1e300);
  for (size_t i = 0; i < f16.size(); ++i) EXPECT_EQ(f.at("b.f16").float_at(int64_t(i)), f16[i]);
  EXPECT_EQ(f.at("c.bf16").shape, (std::vector<int64_t>{7, 1}));
  EXPECT_EQ(f.metadata(), (std::vector<std::pair<std::string, std::string>>{
                              {"format", "pt"}, {"note", "written by the test"}}));
}

TEST_F(SafetensorsTest, EveryF16BitPatternDecodesToItsValue) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  const SafetensorsFile f =
      SafetensorsFile::open(write(safetensors_bytes({{"h", "F16", {65536}, testing::u16_bytes(all)}})));
  const std::vector<float> got = f.at("h").to_floats();
  for (uint32_t i = 0; i < 65536; ++i) {
    const int exp = (i >> 10) & 0x1f;
    const int mant = i & 0x3ff;
    const double sign = (i & 0x8000) ? -1.0 : 1.0;
    if (exp == 0x1f && mant != 0) {
      EXPECT_TRUE(std::isnan(got[i])) << i;
      continue;
    }
    const double want = exp == 0x1f ? sign * HUGE_VAL
                        : exp == 0  ? sign * std::ldexp(mant, -24)
                                    : sign * std::ldexp(1024 + mant, exp - 25);
    ASSERT_EQ(static_cast<double>(got[i]), want) << "bits " << i;
    ASSERT_EQ(std::signbit(got[i]), (i & 0x8000) != 0) << "bits " << i;
  }
}

TEST_F(SafetensorsTest, IntegerTypesScalarsAndEmptyTensors) {
  const std::vector<int64_t> i64 = {0, -1, std::numeric_limits<int64_t>::max(), 42};
  const std::vector<int32_t> i32 = {-7, 2147483647};
  const std::vector<int8_t> i8 = {-128, 127};
  const fs::path p = write(safetensors_bytes({
      {"ids", "I64", {2, 2}, testing::le_bytes(i64)},
      {"i32", "I32", {2}, testing::le_bytes(i32)},
      {"i8", "I8", {2}, testing::le_bytes(i8)},
      {"flags", "BOOL", {3}, {1, 0, 1}},
      {"scalar", "F32", {}, testing::f32_bytes({2.0f})},
      {"empty", "BF16", {0, 5}, {}},
  }));
  const SafetensorsFile f = SafetensorsFile::open(p);
  EXPECT_EQ(f.at("ids").to_ints(), i64);
  EXPECT_EQ(f.at("i32").to_ints(), (std::vector<int64_t>{-7, 2147483647}));
  EXPECT_EQ(f.at("i8").to_ints(), (std::vector<int64_t>{-128, 127}));
  EXPECT_EQ(f.at("flags").to_ints(), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(f.at("scalar").numel(), 1);
  EXPECT_EQ(f.at("scalar").float_at(0), 2.0);
  EXPECT_EQ(f.at("empty").numel(), 0);
  EXPECT_TRUE(f.at("empty").to_floats().empty());
  EXPECT_THROW(f.at("ids").int_at(4), SafetensorsError);
  EXPECT_THROW(f.at("ids").int_at(-1), SafetensorsError);
  EXPECT_THROW(f.at("empty").to_ints(), SafetensorsError);  // BF16 is not an integer type
}

TEST_F(SafetensorsTest, ViewsPointIntoTheMappingAndSurviveAMove) {
  const fs::path p = write(safetensors_bytes({{"a", "F32", {4}, testing::f32_bytes({1, 2, 3, 4})},
                                              {"b", "F32", {2}, testing::f32_bytes({5, 6})}}));
  SafetensorsFile f = SafetensorsFile::open(p);
  const TensorView* a = f.find("a");
  const TensorView* b = f.find("b");
  ASSERT_TRUE(a && b);
  // Zero-copy: the views sit where the header says, 16 bytes apart in the same mapping.
  EXPECT_EQ(b->bytes.data() - a->bytes.data(), 16);
  EXPECT_EQ(f.file_bytes(), fs::file_size(p));

  SafetensorsFile moved = std::move(f);
  EXPECT_EQ(moved.find("a"), a);
  EXPECT_EQ(a->float_at(3), 4.0);
  SafetensorsFile assigned = SafetensorsFile::open(p);
  assigned = std::move(moved);
  EXPECT_EQ(b->float_at(1), 6.0);
  EXPECT_EQ(assigned.path(), p);
}

TEST_F(SafetensorsTest, ParsesFromMemoryWithoutAFile) {
  const std::vector<uint8_t> bytes = safetensors_bytes({{"x", "F32", {2}, testing::f32_bytes({7, 8})}});
  const auto span = std::as_bytes(std::span(bytes));
  const SafetensorsContents c = parse_safetensors(span, "in-memory");
  ASSERT_EQ(c.tensors.size(), 1u);
  EXPECT_EQ(c.tensors[0].bytes.data(), span.data() + bytes.size() - 8);
  EXPECT_EQ(c.find("x")->float_at(1), 8.0);
  EXPECT_EQ(c.data_bytes, 8u);
  try {
    parse_safetensors(span.first(4), "in-memory");
    ADD_FAILURE();
  } catch (const SafetensorsError& e) {
    EXPECT_STREQ(e.what(), "in-memory: truncated: 4 bytes, but a safetensors file starts with an "
                           "8-byte header length");
  }
}

// ---- corrupt files: each refused with a message naming the file, tensor and problem ----------------

TEST_F(SafetensorsTest, TruncatedFiles) {
  expect_error({}, "truncated: 0 bytes");
  expect_error({1, 2, 3}, "truncated: 3 bytes");
  // A whole file cut short inside its data section.
  std::vector<uint8_t> bytes = safetensors_bytes({{"w", "F32", {4}, testing::f32_bytes({1, 2, 3, 4})}});
  bytes.resize(bytes.size() - 3);
  expect_error(bytes, "tensor 'w' data_offsets [0, 16] past the end of the data section (13 bytes)");
}

TEST_F(SafetensorsTest, HeaderLengthPastTheEnd) {
  std::vector<uint8_t> bytes = raw_safetensors("{}", {});
  bytes[0] = 200;
  expect_error(bytes, "header length 200 is past the end of the file (2 bytes after the length field)");
  bytes[7] = 0xff;  // 2^63 and more: must not wrap around
  expect_error(bytes, "is past the end of the file");
}

TEST_F(SafetensorsTest, HeaderLengthOverTheLimit) {
  // A sparse 100 MB file costs no disk; the limit must trip before the header is looked at.
  std::vector<uint8_t> bytes(8);
  const uint64_t n = kMaxSafetensorsHeaderBytes + 1;
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(n >> (8 * i));
  const fs::path p = write(bytes);
  fs::resize_file(p, n + 8);
  try {
    SafetensorsFile::open(p);
    ADD_FAILURE();
  } catch (const SafetensorsError& e) {
    EXPECT_NE(std::string(e.what()).find("header length 100000001 exceeds the 100000000-byte limit"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(SafetensorsTest, HeaderNotJson) {
  expect_error(raw_safetensors("not json at all", {}), "header is not valid JSON");
  expect_error(raw_safetensors("{\"a\": ", {}), "header is not valid JSON");
  expect_error(raw_safetensors("[1, 2]", {}), "header must be a JSON object, got an array");
  expect_error(raw_safetensors(std::string("{\"a") + '\0' + "\": 1}", {}), "header is not valid JSON");
  expect_error(raw_safetensors("{\"\xff\": {}}", {}), "header is not valid JSON");
}

TEST_F(SafetensorsTest, OffsetsPastTheEnd) {
  // The exact message from the spec of this reader.
  expect_error(raw_safetensors(header_of(R"("lm_head.weight": {"dtype": "F32", "shape": [32, 32],
                                            "data_offsets": [0, 4096]})"),
                               std::vector<uint8_t>(2048)),
               "tensor 'lm_head.weight' data_offsets [0, 4096] past the end of the data section "
               "(2048 bytes)");
  expect_error(raw_safetensors(header_of(R"("w": {"dtype": "U8", "shape": [0],
                                            "data_offsets": [9, 9]})"),
                               std::vector<uint8_t>(8)),
               "tensor 'w' data_offsets [9, 9] past the end of the data section (8 bytes)");
  expect_error(raw_safetensors(header_of(R"("w": {"dtype": "U8", "shape": [1],
                                            "data_offsets": [18446744073709551615, 0]})"),
                               std::vector<uint8_t>(8)),
               "end before they begin");
}

TEST_F(SafetensorsTest, OverlappingRanges) {
  expect_error(raw_safetensors(header_of(R"("a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                                            "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]})"),
                               std::vector<uint8_t>(16)),
               "tensors 'a' data_offsets [0, 16] and 'b' data_offsets [8, 16] overlap");
  // Nested inside a big one, not adjacent to it after sorting.
  expect_error(raw_safetensors(header_of(R"("big": {"dtype": "U8", "shape": [100], "data_offsets": [0, 100]},
                                            "mid": {"dtype": "U8", "shape": [10], "data_offsets": [10, 20]},
                                            "end": {"dtype": "U8", "shape": [10], "data_offsets": [50, 60]})"),
                               std::vector<uint8_t>(100)),
               "tensors 'big' data_offsets [0, 100] and 'mid' data_offsets [10, 20] overlap");
  // Identical ranges are an overlap too; empty tensors occupy nothing and may share an offset.
  expect_error(raw_safetensors(header_of(R"("x": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                                            "y": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]})"),
                               std::vector<uint8_t>(4)),
               "overlap");
  const fs::path ok = write(raw_safetensors(
      header_of(R"("x": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                   "e": {"dtype": "U8", "shape": [0], "data_offsets": [2, 2]})"),
      std::vector<uint8_t>(4)), "ok.safetensors");
  EXPECT_NO_THROW(SafetensorsFile::open(ok));
}

TEST_F(SafetensorsTest, SizeMismatch) {
  expect_error(raw_safetensors(header_of(R"("w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]})"),
                               std::vector<uint8_t>(16)),
               "tensor 'w' F32 [2, 2] needs 16 bytes but data_offsets [0, 12] span 12");
  expect_error(raw_safetensors(header_of(R"("w": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 8]})"),
                               std::vector<uint8_t>(8)),
               "needs 6 bytes but data_offsets [0, 8] span 8");
}

TEST_F(SafetensorsTest, UnknownDtype) {
  expect_error(raw_safetensors(header_of(R"("w": {"dtype": "Q4_K", "shape": [2], "data_offsets": [0, 2]})"),
                               std::vector<uint8_t>(2)),
               "tensor 'w' has unknown dtype 'Q4_K'");
  expect_error(raw_safetensors(header_of(R"("w": {"dtype": 4, "shape": [2], "data_offsets": [0, 2]})"),
                               std::vector<uint8_t>(2)),
               "tensor 'w' dtype must be a string, got an integer");
}

TEST_F(SafetensorsTest, BadShapes) {
  expect_error(raw_safetensors(header_of(R"("w": {"dtype": "U8", "shape": [2, -1], "data_offsets": [0, 2]})"),
                               std::vector<uint8_t>(2)),
               "tensor 'w' shape [2,-1] has a negative dimension");
  expect_error(raw_safetensors(header_of(R"("w": {"dtype": "U8", "shape": [2.0], "data_offsets": [0, 2]})"),
                               std::vector<uint8_t>(2)),
               "holds a real number, not an integer");
  expect_error(raw_safetensors(header_of(R"("w": {"dtype": "U8", "shape": 2, "data_offsets": [0, 2]})"),
                               std::vector<uint8_t>(2)),
               "shape must be an array");
  // 2^32 * 2^32 overflows int64; so does a dimension past INT64_MAX.
  expect_error(raw_safetensors(header_of(R"("w": {"dtype": "U8", "shape": [4294967296, 4294967296],
                                            "data_offsets": [0, 0]})"),
                               {}),
               "the element count overflows");
  expect_error(raw_safetensors(header_of(R"("w": {"dtype": "F64", "shape": [4611686018427387904],
                                            "data_offsets": [0, 0]})"),
                               {}),
               "the byte size overflows");
  expect_error(raw_safetensors(header_of(R"("w": {"dtype": "U8", "shape": [9223372036854775808],
                                            "data_offsets": [0, 0]})"),
                               {}),
               "has a too large dimension");
}

TEST_F(SafetensorsTest, StrictEntryFields) {
  expect_error(raw_safetensors(header_of(R"("w": {"dtype": "U8", "shape": [1]})"), {0}),
               "tensor 'w' has no 'data_offsets'");
  expect_error(raw_safetensors(header_of(R"("w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1], "x": 1})"), {0}),
               "tensor 'w' has an unknown field 'x'");
  expect_error(raw_safetensors(header_of(R"("w": {"dtype": "U8", "shape": [1], "data_offsets": [0]})"), {0}),
               "data_offsets must be [begin, end] with non-negative integers, got [0]");
  expect_error(raw_safetensors(header_of(R"("w": {"dtype": "U8", "shape": [1], "data_offsets": [-1, 0]})"), {0}),
               "data_offsets must be [begin, end]");
  expect_error(raw_safetensors(header_of(R"("w": [1, 2])"), {}), "tensor 'w' must be an object");
  expect_error(raw_safetensors(header_of(R"("": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]})"), {}),
               "a tensor has an empty name");
  expect_error(raw_safetensors(header_of(R"("__metadata__": {"format": 1})"), {}),
               "__metadata__ value for 'format' must be a string, got an integer");
  expect_error(raw_safetensors(header_of(R"("__metadata__": "pt")"), {}), "__metadata__ must be an object");
  // Names are quoted with control bytes escaped, so a hostile name cannot forge a message.
  expect_error(raw_safetensors(header_of(R"("a\nb": {"dtype": "X", "shape": [0], "data_offsets": [0, 0]})"), {}),
               "tensor 'a\\x0ab' has unknown dtype 'X'");
}

TEST_F(SafetensorsTest, DeepNestingIsRefusedWithoutRecursion) {
  const std::string deep = "{\"a\": " + std::string(200000, '[') + std::string(200000, ']') + "}";
  expect_error(raw_safetensors(deep, {}), "header is JSON nested deeper than 64 levels");
  // Brackets inside strings do not count.
  const fs::path ok = write(raw_safetensors(
      "{\"__metadata__\": {\"k\": \"" + std::string(1000, '[') + "\\\"\"}}", {}), "ok.safetensors");
  EXPECT_NO_THROW(SafetensorsFile::open(ok));
}

TEST_F(SafetensorsTest, DuplicateKeys) {
  expect_error(raw_safetensors(header_of(R"("w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
                                            "w": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]})"),
                               {0, 0}),
               "duplicate key 'w'");
  expect_error(raw_safetensors(header_of(R"("w": {"dtype": "U8", "dtype": "I8", "shape": [1], "data_offsets": [0, 1]})"),
                               {0}),
               "duplicate key 'dtype'");
  // The same key in sibling objects is fine.
  const fs::path ok = write(raw_safetensors(
      header_of(R"("a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
                   "b": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]})"),
      {0, 0}), "ok.safetensors");
  EXPECT_NO_THROW(SafetensorsFile::open(ok));
}

TEST_F(SafetensorsTest, NotAFileAndMissingTensor) {
  try {
    SafetensorsFile::open(dir_);
    ADD_FAILURE();
  } catch (const SafetensorsError& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
  try {
    SafetensorsFile::open(dir_ / "nope.safetensors");
    ADD_FAILURE();
  } catch (const SafetensorsError& e) {
    EXPECT_NE(std::string(e.what()).find("nope.safetensors: cannot open: No such file"), std::string::npos)
        << e.what();
  }
  const SafetensorsFile f = SafetensorsFile::open(write(safetensors_bytes({})));
  EXPECT_TRUE(f.tensors().empty());
  try {
    f.at("lm_head.weight");
    ADD_FAILURE();
  } catch (const SafetensorsError& e) {
    EXPECT_NE(std::string(e.what()).find("model.safetensors: missing tensor 'lm_head.weight'"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace amk

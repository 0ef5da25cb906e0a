// The GGUF importer: hand-written files byte by byte, one named error per way a file can be
// corrupt, dequantisation bit-exact against the `gguf` Python package (gguf.quants.dequantize, an
// independent implementation), GGUF versions of the tiny fixtures written by that package's
// GGUFWriter (with llama.cpp's q/k permutation applied by the script) that must import to the
// fixtures' exact tensors, and the real SmolLM2-135M-Instruct Q4_1 file: its config, a tensor
// against the Python dequantisation, and greedy decoding to the README's continuation.
//
// The Python tests need AMK_PYTHON (scripts/pyenv.sh's python, with gguf and numpy), the SmolLM2
// ones AMK_ASSETS_DIR (scripts/fetch_assets.sh); without them they skip and say which is unset.
#include <gtest/gtest.h>

#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "amk/checkpoint.h"
#include "amk/gguf.h"
#include "amk/gguf_dequant.h"
#include "amk/gguf_model.h"
#include "support/amk_command.h"
#include "support/safetensors_writer.h"

namespace amk {
namespace {

namespace fs = std::filesystem;
using testing::run_amk;
using testing::shell_quote;

const fs::path kFixtures = fs::path(AMK_TESTDATA_DIR) / "fixtures";

// ---- a GGUF byte writer independent of the reader ------------------------------------------------

struct Bytes {
  std::vector<uint8_t> b;
  Bytes& raw(const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    b.insert(b.end(), c, c + n);
    return *this;
  }
  Bytes& u8(uint8_t v) { return raw(&v, 1); }
  Bytes& u32(uint32_t v) { return raw(&v, 4); }
  Bytes& u64(uint64_t v) { return raw(&v, 8); }
  Bytes& str(const std::string& s) {
    u64(s.size());
    return raw(s.data(), s.size());
  }
  Bytes& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    raw("GGUF", 4);
    u32(version);
    u64(n_tensors);
    return u64(n_kv);
  }
  Bytes& kv_u32(const std::string& key, uint32_t v) { return str(key).u32(4).u32(v); }
  Bytes& kv_str(const std::string& key, const std::string& v) { return str(key).u32(8).str(v); }
  Bytes& tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(dims.size()));
    for (const uint64_t d : dims) u64(d);
    return u32(type).u64(offset);
  }
  Bytes& pad(size_t align) {
    while (b.size() % align) b.push_back(0);
    return *this;
  }
};

// Writes every metadata type once (tensor-free), in the layout the spec gives.
std::vector<uint8_t> all_types_file() {
  Bytes f;
  f.header(3, 0, 16);
  f.str("t.u8").u32(0).u8(200);
  f.str("t.i8").u32(1).u8(0x9c);  // -100
  f.str("t.u16").u32(2).raw("\xe8\xfd", 2);  // 65000
  f.str("t.i16").u32(3).raw("\xd0\x8a", 2);  // -30000
  f.str("t.u32").u32(4).u32(4000000000u);
  f.str("t.i32").u32(5).u32(static_cast<uint32_t>(-2000000000));
  const float f32 = 1.5f;
  f.str("t.f32").u32(6).raw(&f32, 4);
  f.str("t.bool").u32(7).u8(1);
  f.str("t.str").u32(8).str("h\xc3\xa9llo");
  f.str("t.u64").u32(10).u64(uint64_t{1} << 63);  // beyond int64
  f.str("t.i64").u32(11).u64(static_cast<uint64_t>(-(int64_t{1} << 62)));
  const double f64 = 0.1;
  f.str("t.f64").u32(12).raw(&f64, 8);
  f.str("t.strs").u32(9).u32(8).u64(3).str("a").str("").str("x y");
  f.str("t.ints").u32(9).u32(5).u64(3).u32(1).u32(static_cast<uint32_t>(-2)).u32(3);
  f.str("t.floats").u32(9).u32(6).u64(2);
  for (const float v : {0.5f, -2.25f}) f.raw(&v, 4);
  // [[7, 8], []] as arrays of uint16
  f.str("t.nested").u32(9).u32(9).u64(2).u32(2).u64(2).raw("\x07\x00\x08\x00", 4).u32(2).u64(0);
  return f.b;
}

// One F32 [2, 3] tensor (GGUF dims {3, 2}) and one Q8_0 [1, 32], at aligned offsets.
std::vector<uint8_t> two_tensor_file(uint32_t version = 3) {
  Bytes f;
  f.header(version, 2, 2).kv_str("general.architecture", "none").kv_u32("general.alignment", 64);
  f.tensor("a", {3, 2}, 0, 0).tensor("b", {32, 1}, 8, 64);
  f.pad(64);
  for (int i = 0; i < 6; ++i) {
    const float v = float(i) - 2.5f;
    f.raw(&v, 4);
  }
  f.pad(64);
  f.raw("\x00\x3c", 2);  // d = 1.0 (f16)
  for (int i = 0; i < 32; ++i) f.u8(static_cast<uint8_t>(i - 16));
  return f.b;
}

GgufContents parse(const std::vector<uint8_t>& bytes, const std::string& name = "test.gguf") {
  return parse_gguf(std::as_bytes(std::span(bytes)), name);
}

// Parsing must fail with a message naming the file and containing `needle`.
void expect_error(const std::vector<uint8_t>& bytes, const std::string& needle) {
  try {
    parse(bytes, "bad.gguf");
    ADD_FAILURE() << "parsed a corrupt file; expected an error containing: " << needle;
  } catch (const GgufError& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(msg.starts_with("bad.gguf: ")) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << "message: " << msg << "\nwanted: " << needle;
  }
}

// ---- hand-written files ---------------------------------------------------------------------------

TEST(GgufParse, EveryMetadataTypeReadsBack) {
  const auto bytes = all_types_file();
  const GgufContents g = parse(bytes);
  EXPECT_EQ(g.version, 3u);
  EXPECT_EQ(g.alignment, 32u);
  ASSERT_EQ(g.metadata.size(), 16u);
  EXPECT_EQ(g.metadata[0].key, "t.u8");  // file order kept
  EXPECT_EQ(g.get_int("t.u8"), 200);
  EXPECT_EQ(g.get_int("t.i8"), -100);
  EXPECT_EQ(g.get_int("t.u16"), 65000);
  EXPECT_EQ(g.get_int("t.i16"), -30000);
  EXPECT_EQ(g.get_int("t.u32"), 4000000000);
  EXPECT_EQ(g.get_int("t.i32"), -2000000000);
  EXPECT_EQ(g.get_float("t.f32"), 1.5);
  EXPECT_EQ(g.get_bool("t.bool"), true);
  EXPECT_EQ(g.get_string("t.str"), "h\xc3\xa9llo");
  EXPECT_EQ(g.get_int("t.i64"), -(int64_t{1} << 62));
  EXPECT_EQ(g.get_float("t.f64"), 0.1);
  EXPECT_EQ(g.get_strings("t.strs"), (std::vector<std::string_view>{"a", "", "x y"}));
  EXPECT_EQ(g.get_ints("t.ints"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(g.get_floats("t.floats"), (std::vector<double>{0.5, -2.25}));
  const GgufValue* nested = g.find("t.nested");
  ASSERT_NE(nested, nullptr);
  EXPECT_EQ(nested->type_text(), "array of array of uint16");
  const auto outer = nested->elements();
  ASSERT_EQ(outer.size(), 2u);
  ASSERT_EQ(outer[0].size(), 2u);
  EXPECT_EQ(outer[0].elements()[1].as_int(), 8);
  EXPECT_EQ(outer[1].size(), 0u);
  // Absent keys and wrong types are errors that name the key; opt_* give nullopt when absent.
  EXPECT_FALSE(g.opt_int("nope").has_value());
  EXPECT_FALSE(g.opt_string("nope").has_value());
  try {
    (void)g.get_string("t.u32");
    ADD_FAILURE() << "read a uint32 as a string";
  } catch (const GgufError& e) {
    EXPECT_STREQ(e.what(), "test.gguf: metadata 't.u32' has type uint32, not a string");
  }
  EXPECT_THROW((void)g.get_int("t.u64"), GgufError);  // 2^63 does not fit int64
  EXPECT_THROW((void)g.get_int("t.f32"), GgufError);
  EXPECT_THROW((void)g.get_strings("t.ints"), GgufError);
  EXPECT_THROW((void)g.get_float("absent"), GgufError);
  EXPECT_THROW((void)g.opt_bool("t.u8"), GgufError);
}

TEST(GgufParse, TensorsAlignmentAndData) {
  for (const uint32_t version : {2u, 3u}) {
    const auto bytes = two_tensor_file(version);
    const GgufContents g = parse(bytes);
    EXPECT_EQ(g.version, version);
    EXPECT_EQ(g.alignment, 64u);
    ASSERT_EQ(g.tensors.size(), 2u);
    const GgufTensor* a = g.find_tensor("a");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->type, GgmlType::F32);
    EXPECT_EQ(a->dims, (std::vector<int64_t>{3, 2}));
    EXPECT_EQ(a->numel(), 6);
    EXPECT_EQ(g.data_offset % 64, 0u);
    EXPECT_EQ(dequantize(*a, "t"), (std::vector<float>{-2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f}));
    const GgufTensor* b = g.find_tensor("b");
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->data.size(), 34u);
    const std::vector<float> q = dequantize(*b, "t");
    for (int i = 0; i < 32; ++i) EXPECT_EQ(q[size_t(i)], float(i - 16)) << i;
    EXPECT_EQ(g.find_tensor("c"), nullptr);
  }
}

// ---- one named error per corruption ----------------------------------------------------------------

TEST(GgufErrors, TruncatedAtEveryLength) {
  const auto good = two_tensor_file();
  for (size_t n = 0; n < good.size(); ++n) {
    const std::vector<uint8_t> cut(good.begin(), good.begin() + std::ptrdiff_t(n));
    EXPECT_THROW(parse(cut), GgufError) << "length " << n;
  }
  expect_error({'G', 'G'}, "truncated: 2 bytes");
  std::vector<uint8_t> cut(good.begin(), good.begin() + 40);
  expect_error(cut, "truncated");
  cut.assign(good.begin(), good.end() - 1);  // the last tensor's data runs past the end
  expect_error(cut, "tensor 'b' (Q8_0 [32, 1], 34 bytes at data offset 64) lies past the end");
}

TEST(GgufErrors, MagicAndVersion) {
  auto bytes = two_tensor_file();
  bytes[0] = 'X';
  expect_error(bytes, "bad magic 'XGUF'");
  for (const auto& [version, needle] : std::vector<std::pair<uint32_t, std::string>>{
           {1, "GGUF version 1"},
           {4, "unsupported GGUF version 4"},
           {0, "unsupported GGUF version 0"},
           {0x03000000, "big-endian"}}) {
    Bytes f;
    f.header(version, 0, 0);
    expect_error(f.b, needle);
  }
}

TEST(GgufErrors, HugeCountsAreRefusedBeforeAllocation) {
  Bytes a;
  a.header(3, uint64_t{1} << 40, 0);
  expect_error(a.b, "tensor count 1099511627776 exceeds the limit");
  Bytes b;
  b.header(3, 0, ~uint64_t{0});
  expect_error(b.b, "metadata count 18446744073709551615 exceeds the limit");
  Bytes c;  // within the cap, but the file cannot hold that many
  c.header(3, 0, 60000);
  expect_error(c.b, "truncated: 60000 metadata entries declared");
  Bytes d;  // an array claiming 2^61 uint64 elements
  d.header(3, 0, 1).str("k").u32(9).u32(10).u64(uint64_t{1} << 61);
  expect_error(d.b, "metadata 'k' declares 2305843009213693952 elements of type uint64");
  Bytes e;  // a string claiming 2^63 bytes
  e.header(3, 0, 1).str("k").u32(8).u64(uint64_t{1} << 63);
  expect_error(e.b, "metadata 'k' is 9223372036854775808 bytes long, over the");
  Bytes f;  // a tensor whose element count overflows int64
  f.header(3, 1, 0).tensor("t", {uint64_t{1} << 32, uint64_t{1} << 32}, 0, 0);
  expect_error(f.b, "tensor 't' dimensions [4294967296, 4294967296]...: the element count overflows");
  Bytes g;  // arrays nested past the depth limit
  g.header(3, 0, 1).str("k").u32(9);  // an array of arrays of arrays ...
  for (int i = 0; i < 10; ++i) g.u32(9).u64(1);
  expect_error(g.b, "nests arrays deeper than the limit of 8");
  Bytes h;
  h.header(3, 1, 0).tensor("t", {1, 1, 1, 1, 1}, 0, 0);
  expect_error(h.b, "tensor 't' has 5 dimensions, more than ggml's 4");
}

TEST(GgufErrors, OffsetsAlignmentAndOverlap) {
  const auto with = [](uint64_t offset_b, uint32_t align = 64) {
    Bytes f;
    f.header(3, 2, 1).kv_u32("general.alignment", align);
    f.tensor("a", {8}, 0, 0).tensor("b", {8}, 0, offset_b);
    f.pad(align == 0 ? 1 : align);
    f.b.resize(f.b.size() + 128, 0);
    return f.b;
  };
  EXPECT_NO_THROW(parse(with(64)));
  expect_error(with(4), "tensor 'b' offset 4 is misaligned: not a multiple of the alignment 64");
  expect_error(with(128), "tensor 'b' (F32 [8], 32 bytes at data offset 128) lies past the end");
  expect_error(with(~uint64_t{0} - 63), "lies past the end");  // offset + size would wrap
  expect_error(with(0), "tensors 'a' and 'b' overlap");
  expect_error(with(64, 48), "general.alignment 48 is not a power of two");
  expect_error(with(64, 0), "general.alignment 0 is not a power of two");
  Bytes s;
  s.header(3, 0, 1).kv_str("general.alignment", "32");
  expect_error(s.b, "general.alignment is string, not a uint32");
}

TEST(GgufErrors, UnknownTypesAndBadValues) {
  Bytes a;
  a.header(3, 0, 1).str("k").u32(13).u32(0);
  expect_error(a.b, "metadata 'k' has unknown value type 13");
  Bytes b;
  b.header(3, 0, 1).str("k").u32(9).u32(99).u64(0);
  expect_error(b.b, "unknown value type 99");
  Bytes c;
  c.header(3, 1, 0).tensor("t", {32}, 4, 0);  // 4 was Q4_2, removed from ggml
  expect_error(c.b, "tensor 't' has unknown tensor type 4");
  Bytes d;
  d.header(3, 0, 1).str("k").u32(7).u8(2);
  expect_error(d.b, "metadata 'k' is a bool holding 2, not 0 or 1");
  Bytes e;
  e.header(3, 1, 0).tensor("t", {48}, 2, 0);  // Q4_0 rows must be whole blocks of 32
  expect_error(e.b, "the first dimension 48 is not a multiple of the block size 32");
  Bytes f;
  f.header(3, 0, 1).str("").u32(4).u32(1);
  expect_error(f.b, "metadata entry 0 has an empty key");
}

TEST(GgufErrors, DuplicateNames) {
  Bytes a;
  a.header(3, 0, 2).kv_u32("k", 1).kv_u32("k", 2);
  expect_error(a.b, "duplicate metadata key 'k'");
  Bytes b;
  b.header(3, 2, 0).tensor("w", {8}, 0, 0).tensor("w", {8}, 0, 32);
  b.pad(32);
  b.b.resize(b.b.size() + 64, 0);
  expect_error(b.b, "duplicate tensor name 'w'");
}

TEST(GgufErrors, FileErrorsNameTheFile) {
  const fs::path missing = fs::temp_directory_path() / "amk_no_such_file.gguf";
  try {
    GgufFile::open(missing);
    ADD_FAILURE();
  } catch (const GgufError& e) {
    EXPECT_NE(std::string(e.what()).find(missing.string() + ": cannot open"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(GgufFile::open(fs::temp_directory_path()), GgufError);
}

TEST(GgufErrors, CommandsReportACorruptGgufAsBadInput) {
  const fs::path path =
      fs::temp_directory_path() / ("amk_bad_" + std::to_string(::getpid()) + ".gguf");
  auto bytes = two_tensor_file();
  bytes[5] = 7;  // version 0x0703: neither 2 nor 3
  testing::write_bytes(path, bytes);
  const auto r = run_amk("run " + shell_quote(path.string()) + " --device cpu --prompt-ids 1 -n 1");
  fs::remove(path);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(path.string() + ": unsupported GGUF version 1795"), std::string::npos)
      << r.err;
}

// ---- names, permutation, dequantisation on known values ---------------------------------------------

TEST(GgufModel, TensorNames) {
  const std::pair<const char*, const char*> cases[] = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"},
      {"blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight"},
      {"blk.12.attn_k.bias", "model.layers.12.self_attn.k_proj.bias"},
      {"blk.1.attn_v.weight", "model.layers.1.self_attn.v_proj.weight"},
      {"blk.1.attn_output.weight", "model.layers.1.self_attn.o_proj.weight"},
      {"blk.3.attn_q_norm.weight", "model.layers.3.self_attn.q_norm.weight"},
      {"blk.3.attn_k_norm.weight", "model.layers.3.self_attn.k_norm.weight"},
      {"blk.2.attn_norm.weight", "model.layers.2.input_layernorm.weight"},
      {"blk.2.ffn_norm.weight", "model.layers.2.post_attention_layernorm.weight"},
      {"blk.2.ffn_gate.weight", "model.layers.2.mlp.gate_proj.weight"},
      {"blk.2.ffn_up.weight", "model.layers.2.mlp.up_proj.weight"},
      {"blk.2.ffn_down.weight", "model.layers.2.mlp.down_proj.weight"},
  };
  for (const auto& [gguf, hf] : cases) EXPECT_EQ(gguf_to_hf_name(gguf), std::string(hf)) << gguf;
  for (const char* bad : {"blk.01.attn_q.weight", "blk.x.attn_q.weight", "blk.1.attn_qkv.weight",
                          "blk.1.attn_norm.bias", "blk.1.attn_q", "rope_freqs.weight", "blk..ffn_up.weight",
                          "blk.-1.ffn_up.weight", "token_embd.bias"})
    EXPECT_FALSE(gguf_to_hf_name(bad).has_value()) << bad;
}

TEST(GgufModel, UnpermuteQkRows) {
  // Two heads of 4 rows, 1 column, rows labelled by their Hugging Face index: llama.cpp's order
  // per head is [0, 2, 1, 3] (GGUF row 2i + j holds HF row j * 2 + i).
  std::vector<float> rows = {0, 2, 1, 3, 4, 6, 5, 7};
  unpermute_qk_rows(rows, 2, 1);
  EXPECT_EQ(rows, (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}));
  // Head 6 rows wide, 2 columns: GGUF rows [0, 3, 1, 4, 2, 5] of HF.
  std::vector<float> wide = {0, 0.5, 3, 3.5, 1, 1.5, 4, 4.5, 2, 2.5, 5, 5.5};
  unpermute_qk_rows(wide, 1, 2);
  EXPECT_EQ(wide, (std::vector<float>{0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 5.5}));
  EXPECT_TRUE(gguf_qk_rows_permuted(ModelFamily::Llama));
  EXPECT_TRUE(gguf_qk_rows_permuted(ModelFamily::Mistral));
  EXPECT_FALSE(gguf_qk_rows_permuted(ModelFamily::Qwen2));
  EXPECT_FALSE(gguf_qk_rows_permuted(ModelFamily::Qwen3));
}

TEST(GgufDequant, Q4_1AndF16ByHand) {
  // Q4_1: d = 0.5, m = -1 (f16 0x3800, 0xbc00); byte j holds q = j (low) and 15 - j (high).
  Bytes b;
  b.raw("\x00\x38\x00\xbc", 4);
  for (int j = 0; j < 16; ++j) b.u8(static_cast<uint8_t>(j | ((15 - j) << 4)));
  std::vector<float> out(32);
  dequantize_to_f32(GgmlType::Q4_1, std::as_bytes(std::span(b.b)), out, "t");
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[size_t(j)], 0.5f * float(j) - 1.0f);
    EXPECT_EQ(out[size_t(j + 16)], 0.5f * float(15 - j) - 1.0f);
  }
  EXPECT_EQ(f16_bits_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f16_bits_to_f32(0xfbff), -65504.0f);
  EXPECT_TRUE(std::isinf(f16_bits_to_f32(0x7c00)));
  EXPECT_TRUE(std::isnan(f16_bits_to_f32(0x7e00)));
  // Sizes are checked, and unsupported types named.
  EXPECT_THROW(dequantize_to_f32(GgmlType::Q4_1, std::as_bytes(std::span(b.b)).first(19), out, "t"),
               GgufError);
  std::vector<float> odd(31);
  EXPECT_THROW(dequantize_to_f32(GgmlType::Q4_1, std::as_bytes(std::span(b.b)), odd, "t"),
               GgufError);
  try {
    dequantize_to_f32(GgmlType::Q5_0, {}, {}, "x.gguf: tensor 'w'");
    ADD_FAILURE();
  } catch (const GgufError& e) {
    EXPECT_NE(std::string(e.what()).find("x.gguf: tensor 'w': tensor type Q5_0 is not supported"),
              std::string::npos)
        << e.what();
  }
}

// ---- against the gguf Python package ----------------------------------------------------------------

class GgufPython : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* py = std::getenv("AMK_PYTHON");
    if (py == nullptr || *py == 0)
      GTEST_SKIP() << "AMK_PYTHON is not set (scripts/test.sh sets it to scripts/pyenv.sh's python, "
                      "which has the gguf package)";
    python_ = py;
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("amk_gguf_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  // Runs `script` with the arguments; fails the test on a non-zero exit.
  void run_python(const std::string& script, const std::string& args) {
    const fs::path path = dir_ / "script.py";
    testing::write_text(path, script);
    const std::string cmd = shell_quote(python_) + " " + shell_quote(path.string()) + " " + args +
                            " > " + shell_quote((dir_ / "py.log").string()) + " 2>&1";
    const int rc = std::system(cmd.c_str());
    std::ifstream log(dir_ / "py.log");
    const std::string text((std::istreambuf_iterator<char>(log)), {});
    ASSERT_EQ(rc, 0) << "python failed:\n" << text;
  }
  static std::vector<uint32_t> read_u32s(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    const std::string s((std::istreambuf_iterator<char>(in)), {});
    std::vector<uint32_t> out(s.size() / 4);
    std::memcpy(out.data(), s.data(), out.size() * 4);
    return out;
  }

  std::string python_;
  fs::path dir_;
};

// Random raw blocks of every supported type (finite f16 scales, so that numpy's and our f16
// widening agree on every bit: NaN payloads are the one thing hardware conversions may change),
// written with GGUFWriter; the expected f32 values are gguf.quants.dequantize's.
constexpr const char* kDequantScript = R"PY(
import sys, numpy as np, gguf
from gguf import GGMLQuantizationType as T
out = sys.argv[1]
rng = np.random.default_rng(20261124)
def finite_f16(shape):
    x = rng.integers(0, 0x10000, size=shape, dtype=np.uint32).astype(np.uint16)
    return np.where((x & 0x7c00) == 0x7c00, x ^ 0x4000, x).astype(np.uint16)  # no inf / NaN
# (type, blocks per row, [byte offsets of the f16 scales in a block])
cases = [(T.Q8_0, 3, [0]), (T.Q4_0, 3, [0]), (T.Q4_1, 3, [0, 2]),
         (T.Q4_K, 2, [0, 2]), (T.Q5_K, 2, [0, 2]), (T.Q6_K, 2, [208])]
w = gguf.GGUFWriter(out + "/quants.gguf", "llama")
expected = {}
rows = 5
for qtype, nblk, scale_at in cases:
    bsize, tsize = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(rows, nblk, tsize), dtype=np.uint8)
    for at in scale_at:
        raw[:, :, at:at + 2] = finite_f16((rows, nblk)).view(np.uint8).reshape(rows, nblk, 2)
    raw = raw.reshape(rows, nblk * tsize)
    w.add_tensor(qtype.name, raw, raw_dtype=qtype)
    expected[qtype.name] = gguf.quants.dequantize(raw, qtype)
# Plain types over all bit patterns (NaNs included: compared as NaN).
f32 = rng.integers(0, 2**32, size=(rows, 128), dtype=np.uint64).astype(np.uint32).view(np.float32)
w.add_tensor("F32", f32)
expected["F32"] = gguf.quants.dequantize(f32.view(np.uint8), T.F32)
f16 = np.arange(0, 0x10000, dtype=np.uint32).astype(np.uint16).reshape(256, 256)
w.add_tensor("F16", f16.view(np.float16))
expected["F16"] = gguf.quants.dequantize(f16.view(np.uint8), T.F16)
bf16 = np.arange(0, 0x10000, dtype=np.uint32).astype(np.uint16).reshape(256, 256)
w.add_tensor("BF16", bf16.view(np.uint8), raw_dtype=T.BF16)
expected["BF16"] = gguf.quants.dequantize(bf16.view(np.uint8), T.BF16)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
for name, values in expected.items():
    assert values.dtype == np.float32
    values.tofile(out + "/" + name + ".f32")
)PY";

TEST_F(GgufPython, DequantisationIsBitExactAgainstTheGgufPackage) {
  run_python(kDequantScript, shell_quote(dir_.string()));
  const GgufFile file = GgufFile::open(dir_ / "quants.gguf");
  const std::pair<const char*, GgmlType> types[] = {
      {"F32", GgmlType::F32},   {"F16", GgmlType::F16},   {"BF16", GgmlType::BF16},
      {"Q8_0", GgmlType::Q8_0}, {"Q4_0", GgmlType::Q4_0}, {"Q4_1", GgmlType::Q4_1},
      {"Q4_K", GgmlType::Q4_K}, {"Q5_K", GgmlType::Q5_K}, {"Q6_K", GgmlType::Q6_K}};
  for (const auto& [name, type] : types) {
    SCOPED_TRACE(name);
    const GgufTensor* t = file->find_tensor(name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->type, type);
    const std::vector<float> got = dequantize(*t, "quants.gguf");
    const std::vector<uint32_t> want = read_u32s(dir_ / (std::string(name) + ".f32"));
    ASSERT_EQ(got.size(), want.size());
    ASSERT_GE(got.size(), 400u);
    size_t distinct_signs = 0, mismatches = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const uint32_t g = std::bit_cast<uint32_t>(got[i]);
      const float w = std::bit_cast<float>(want[i]);
      distinct_signs += std::signbit(got[i]) ? 1 : 0;
      const bool same = g == want[i] || (std::isnan(got[i]) && std::isnan(w));
      if (!same && mismatches++ < 5)
        ADD_FAILURE() << "element " << i << ": got " << got[i] << " (0x" << std::hex << g
                      << "), gguf.quants gives " << w << " (0x" << want[i] << ")" << std::dec;
    }
    EXPECT_EQ(mismatches, 0u);
    // Random blocks give both signs: a dequantiser returning zeros could not pass the above.
    EXPECT_GT(distinct_signs, got.size() / 10);
    EXPECT_LT(distinct_signs, got.size() - got.size() / 10);
  }
}

// Every metadata type through GGUFWriter (general.alignment 64 included).
constexpr const char* kMetadataScript = R"PY(
import sys, numpy as np, gguf
from gguf import GGUFValueType as V
w = gguf.GGUFWriter(sys.argv[1], "llama")
w.add_custom_alignment(64)
w.add_uint8("t.u8", 255); w.add_int8("t.i8", -128); w.add_uint16("t.u16", 65535)
w.add_int16("t.i16", -32768); w.add_uint32("t.u32", 4294967295); w.add_int32("t.i32", -2147483648)
w.add_float32("t.f32", -0.25); w.add_bool("t.bool", False); w.add_string("t.str", "caf\u00e9 \u2603")
w.add_uint64("t.u64", 2**63 - 1); w.add_int64("t.i64", -2**63); w.add_float64("t.f64", 1e300)
w.add_array("t.strs", ["<s>", "\u0120the", ""])
w.add_key_value("t.i64s", [5, -6], V.ARRAY, V.INT64)
w.add_array("t.f32s", [0.5, 1.25])
w.add_array("t.nested", [[1, 2, 3], [4]])
w.add_array("t.bools", [True, False, True])
w.add_tensor("x", np.arange(12, dtype=np.float32).reshape(3, 4))
w.add_tensor("y", np.ones((2,), dtype=np.float16))
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
)PY";

TEST_F(GgufPython, MetadataWrittenByGgufWriterReadsBack) {
  const fs::path path = dir_ / "meta.gguf";
  run_python(kMetadataScript, shell_quote(path.string()));
  const GgufFile file = GgufFile::open(path);
  const GgufContents& g = file.contents();
  EXPECT_EQ(g.version, 3u);
  EXPECT_EQ(g.alignment, 64u);
  EXPECT_EQ(g.get_string("general.architecture"), "llama");
  EXPECT_EQ(g.get_int("t.u8"), 255);
  EXPECT_EQ(g.get_int("t.i8"), -128);
  EXPECT_EQ(g.get_int("t.u16"), 65535);
  EXPECT_EQ(g.get_int("t.i16"), -32768);
  EXPECT_EQ(g.get_int("t.u32"), 4294967295);
  EXPECT_EQ(g.get_int("t.i32"), -2147483648LL);
  EXPECT_EQ(g.get_float("t.f32"), -0.25);
  EXPECT_EQ(g.get_bool("t.bool"), false);
  EXPECT_EQ(g.get_string("t.str"), "caf\xc3\xa9 \xe2\x98\x83");
  EXPECT_EQ(g.get_int("t.u64"), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(g.get_int("t.i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(g.get_float("t.f64"), 1e300);
  EXPECT_EQ(g.get_strings("t.strs"), (std::vector<std::string_view>{"<s>", "\xc4\xa0the", ""}));
  EXPECT_EQ(g.get_ints("t.i64s"), (std::vector<int64_t>{5, -6}));
  EXPECT_EQ(g.get_floats("t.f32s"), (std::vector<double>{0.5, 1.25}));
  const auto nested = g.find("t.nested")->elements();
  ASSERT_EQ(nested.size(), 2u);
  EXPECT_EQ(nested[0].elements().size(), 3u);
  EXPECT_EQ(nested[1].elements()[0].as_int(), 4);
  const auto bools = g.find("t.bools")->elements();
  ASSERT_EQ(bools.size(), 3u);
  EXPECT_EQ(bools[1].as_bool(), false);
  EXPECT_EQ(bools[2].as_bool(), true);
  const GgufTensor* x = g.find_tensor("x");
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->dims, (std::vector<int64_t>{4, 3}));  // GGUF order: reversed
  EXPECT_EQ(x->offset % 64, 0u);
  const std::vector<float> xs = dequantize(*x, "meta.gguf");
  for (int i = 0; i < 12; ++i) EXPECT_EQ(xs[size_t(i)], float(i));
  const GgufTensor* y = g.find_tensor("y");
  ASSERT_NE(y, nullptr);
  EXPECT_EQ(y->offset % 64, 0u);
  EXPECT_EQ(dequantize(*y, "meta.gguf"), (std::vector<float>{1.0f, 1.0f}));
}

// The tiny fixtures converted the way llama.cpp's converter lays a model out: GGUF names, the
// metadata keys, q/k rows permuted for architecture llama (README: per head, GGUF row 2i + j is
// HF row j * d/2 + i), none for qwen3, and no output.weight for tied embeddings. Written with an
// index permutation of the script's own, not with the reader's inverse.
constexpr const char* kConvertScript = R"PY(
import sys, json, struct, numpy as np, gguf
src, dst = sys.argv[1], sys.argv[2]
cfg = json.load(open(src + "/config.json"))
blob = open(src + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", blob[:8])[0]
header = json.loads(blob[8:8 + n]); data = blob[8 + n:]
tensors = {}
for name, info in header.items():
    if name == "__metadata__": continue
    a, b = info["data_offsets"]
    assert info["dtype"] == "F32"
    tensors[name] = np.frombuffer(data[a:b], dtype=np.float32).reshape(info["shape"])
arch = cfg["model_type"]
heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
hd = cfg["head_dim"]
def to_gguf_rows(w, n_heads):
    half = hd // 2
    order = [h * hd + (r % 2) * half + r // 2 for h in range(n_heads) for r in range(hd)]
    return np.ascontiguousarray(w[order])
names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
         "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
         "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
         "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
         "mlp.down_proj": "ffn_down"}
w = gguf.GGUFWriter(dst, arch)
w.add_block_count(cfg["num_hidden_layers"]); w.add_context_length(cfg["max_position_embeddings"])
w.add_embedding_length(cfg["hidden_size"]); w.add_feed_forward_length(cfg["intermediate_size"])
w.add_head_count(heads); w.add_head_count_kv(kv); w.add_key_length(hd); w.add_value_length(hd)
w.add_rope_dimension_count(hd)
theta = cfg.get("rope_theta") or cfg.get("rope_parameters", {}).get("rope_theta")
w.add_rope_freq_base(theta); w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
w.add_tokenizer_model("gpt2")
w.add_token_list(["t%d" % i for i in range(cfg["vocab_size"])])
if cfg.get("bos_token_id") is not None: w.add_bos_token_id(cfg["bos_token_id"])
if cfg.get("eos_token_id") is not None: w.add_eos_token_id(cfg["eos_token_id"])
for name, t in sorted(tensors.items()):
    if name == "model.embed_tokens.weight": g = "token_embd.weight"
    elif name == "model.norm.weight": g = "output_norm.weight"
    elif name == "lm_head.weight": g = "output.weight"
    else:
        parts = name.split(".")
        layer, module, kind = parts[2], ".".join(parts[3:-1]), parts[-1]
        g = "blk.%s.%s.%s" % (layer, names[module], kind)
        if arch == "llama" and module == "self_attn.q_proj": t = to_gguf_rows(t, heads)
        if arch == "llama" and module == "self_attn.k_proj": t = to_gguf_rows(t, kv)
    w.add_tensor(g, t)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
)PY";

TEST_F(GgufPython, FixturesConvertedToGgufImportToTheSameTensors) {
  for (const char* model : {"tiny-llama", "tiny-qwen3"}) {
    SCOPED_TRACE(model);
    const fs::path gguf_path = dir_ / (std::string(model) + ".gguf");
    run_python(kConvertScript,
               shell_quote((kFixtures / model).string()) + " " + shell_quote(gguf_path.string()));
    const Checkpoint hf = Checkpoint::open(kFixtures / model);
    const Checkpoint gg = Checkpoint::open(gguf_path);
    EXPECT_TRUE(gg.is_gguf());
    EXPECT_FALSE(hf.is_gguf());
    const ModelConfig& a = hf.config();
    const ModelConfig& b = gg.config();
    EXPECT_EQ(b.family, a.family);
    EXPECT_EQ(b.vocab_size, a.vocab_size);
    EXPECT_EQ(b.hidden_size, a.hidden_size);
    EXPECT_EQ(b.intermediate_size, a.intermediate_size);
    EXPECT_EQ(b.num_hidden_layers, a.num_hidden_layers);
    EXPECT_EQ(b.num_attention_heads, a.num_attention_heads);
    EXPECT_EQ(b.num_key_value_heads, a.num_key_value_heads);
    EXPECT_EQ(b.head_dim, a.head_dim);
    EXPECT_EQ(b.max_position_embeddings, a.max_position_embeddings);
    EXPECT_FLOAT_EQ(float(b.rms_norm_eps), float(a.rms_norm_eps));  // stored as float32
    EXPECT_EQ(b.rope, a.rope);
    EXPECT_EQ(b.tie_word_embeddings, a.tie_word_embeddings);
    EXPECT_EQ(b.qk_norm, a.qk_norm);
    EXPECT_EQ(b.attention_qkv_bias, a.attention_qkv_bias);
    EXPECT_EQ(b.attention_out_bias, a.attention_out_bias);
    EXPECT_EQ(gg.eos_token_ids(), hf.eos_token_ids());
    ASSERT_EQ(gg.tensor_names(), hf.tensor_names());
    for (const std::string& name : hf.tensor_names()) {
      const TensorView& x = hf.tensor(name);
      const TensorView& y = gg.tensor(name);
      EXPECT_EQ(y.shape, x.shape) << name;
      EXPECT_EQ(y.dtype, StDType::F32) << name;
      EXPECT_TRUE(y.to_floats() == x.to_floats()) << name << " differs";
    }
    // The command line takes the file: the same greedy tokens as from the folder.
    const std::string args = " --device cpu --prompt-ids 3,17,42,5 -n 6";
    const auto from_folder = run_amk("run " + shell_quote((kFixtures / model).string()) + args);
    const auto from_gguf = run_amk("run " + shell_quote(gguf_path.string()) + args);
    ASSERT_EQ(from_folder.exit_code, 0) << from_folder.err;
    ASSERT_EQ(from_gguf.exit_code, 0) << from_gguf.err;
    EXPECT_EQ(from_gguf.out, from_folder.out);
    EXPECT_FALSE(from_gguf.out.empty());
  }
}

TEST_F(GgufPython, ModelLevelRefusalsNameTheProblem) {
  const auto expect = [&](const std::string& arch, const std::string& body,
                          const std::string& needle) {
    const fs::path path = dir_ / "m.gguf";
    run_python("import sys, numpy as np, gguf\nw = gguf.GGUFWriter(sys.argv[1], '" + arch + "')\n" +
                   body +
                   "\nw.write_header_to_file(); w.write_kv_data_to_file(); "
                   "w.write_tensors_to_file(); w.close()\n",
               shell_quote(path.string()));
    try {
      Checkpoint::open(path);
      ADD_FAILURE() << "opened; expected " << needle;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
    }
  };
  const std::string llama =
      "w.add_block_count(1); w.add_context_length(64); w.add_embedding_length(8)\n"
      "w.add_feed_forward_length(16); w.add_head_count(2); w.add_head_count_kv(1)\n"
      "w.add_token_list(['a','b','c','d'])\n";
  expect("gemma", llama, "unsupported: GGUF architecture 'gemma'");
  expect("llama", llama + "w.add_expert_count(8)\n", "mixture-of-experts");
  expect("llama", llama + "w.add_rope_scaling_type(gguf.RopeScalingType.YARN)\n",
         "rope scaling type 'yarn'");
  expect("llama", "w.add_block_count(1)\n", "'llama.embedding_length' is required");
  expect("llama", llama, "missing tensor 'model.embed_tokens.weight'");
  expect("llama", llama + "w.add_tensor('token_embd.weight', np.zeros((4, 8), np.float32))\n"
         "w.add_tensor('blk.0.attn_qkv.weight', np.zeros((8, 8), np.float32))\n",
         "tensor 'blk.0.attn_qkv.weight' has no counterpart");
  expect("llama", llama + "w.add_tensor('token_embd.weight', np.zeros((5, 8), np.float32))\n",
         "tensor 'token_embd.weight' (model.embed_tokens.weight) has shape [5, 8]");
}

// ---- the real SmolLM2-135M-Instruct Q4_1 file --------------------------------------------------------

fs::path smollm2_or_skip() {
  const char* dir = std::getenv("AMK_ASSETS_DIR");
  if (dir == nullptr || *dir == 0) return {};
  return fs::path(dir) / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf";
}

#define SKIP_WITHOUT_SMOLLM2(path)                                                               \
  const fs::path path = smollm2_or_skip();                                                       \
  if (path.empty())                                                                              \
    GTEST_SKIP() << "AMK_ASSETS_DIR is not set (scripts/test.sh sets it from "                    \
                    "scripts/fetch_assets.sh, which fetches SmolLM2-135M-Instruct.Q4_1.gguf)";   \
  ASSERT_TRUE(fs::exists(path)) << path << " is missing: run scripts/fetch_assets.sh"

TEST(GgufSmolLM2, FileAndConfigMatchTheReadme) {
  SKIP_WITHOUT_SMOLLM2(path);
  const GgufFile file = GgufFile::open(path);
  const GgufContents& g = file.contents();
  EXPECT_EQ(g.version, 3u);
  EXPECT_EQ(g.get_string("general.architecture"), "llama");
  int q4_1 = 0, f32 = 0, q8_0 = 0;
  for (const GgufTensor& t : g.tensors) {
    q4_1 += t.type == GgmlType::Q4_1;
    f32 += t.type == GgmlType::F32;
    q8_0 += t.type == GgmlType::Q8_0;
  }
  EXPECT_EQ(q4_1, 210);
  EXPECT_EQ(f32, 61);
  EXPECT_EQ(q8_0, 1);
  EXPECT_EQ(g.find_tensor("token_embd.weight")->type, GgmlType::Q8_0);
  EXPECT_EQ(g.find_tensor("output.weight"), nullptr);
  // What the tokenizer will read.
  EXPECT_EQ(g.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(g.get_string("tokenizer.ggml.pre"), "smollm");
  EXPECT_EQ(g.get_strings("tokenizer.ggml.tokens").size(), 49152u);
  EXPECT_EQ(g.get_strings("tokenizer.ggml.tokens")[1], "<|im_start|>");
  EXPECT_EQ(g.get_strings("tokenizer.ggml.merges").size(), 48900u);
  const std::vector<int64_t> types = g.get_ints("tokenizer.ggml.token_type");
  EXPECT_EQ(std::count(types.begin(), types.end(), 3), 17);
  EXPECT_EQ(g.get_int("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(g.get_int("tokenizer.ggml.eos_token_id"), 2);
  EXPECT_EQ(g.opt_bool("tokenizer.ggml.add_bos_token"), false);
  EXPECT_NE(g.get_string("tokenizer.chat_template").find("<|im_start|>"), std::string::npos);

  const Checkpoint ck = Checkpoint::open(path);
  const ModelConfig& c = ck.config();
  EXPECT_EQ(c.family, ModelFamily::Llama);
  EXPECT_EQ(c.num_hidden_layers, 30);
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.num_attention_heads, 9);
  EXPECT_EQ(c.num_key_value_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.intermediate_size, 1536);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.rope.theta, 100000.0);
  EXPECT_EQ(c.rope.type, RopeType::Default);
  EXPECT_FLOAT_EQ(float(c.rms_norm_eps), 1e-5f);
  EXPECT_EQ(c.max_position_embeddings, 8192);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_qkv_bias);
  EXPECT_EQ(ck.eos_token_ids(), (std::vector<int64_t>{2}));
  EXPECT_EQ(ck.num_tensors(), 272u);
  EXPECT_EQ(ck.tensor("model.embed_tokens.weight").shape, (std::vector<int64_t>{49152, 576}));
  EXPECT_EQ(ck.tensor("model.layers.29.self_attn.k_proj.weight").shape,
            (std::vector<int64_t>{192, 576}));
  EXPECT_EQ(ck.find("lm_head.weight"), nullptr);
}

// A Q4_1 k projection and the Q8_0 embeddings of the real file, through GGUFReader and
// gguf.quants.dequantize, with the README's row order undone by the script's own indexing.
constexpr const char* kSmolTensorScript = R"PY(
import sys, numpy as np, gguf
r = gguf.GGUFReader(sys.argv[1])
t = {x.name: x for x in r.tensors}
k = gguf.quants.dequantize(t["blk.7.attn_k.weight"].data, t["blk.7.attn_k.weight"].tensor_type)
hd, half = 64, 32
order = np.empty(k.shape[0], dtype=np.int64)
for h in range(k.shape[0] // hd):
    for i in range(half):
        for j in range(2):
            order[h * hd + j * half + i] = h * hd + 2 * i + j   # HF row <- GGUF row
np.ascontiguousarray(k[order]).astype(np.float32).tofile(sys.argv[2] + "/k.f32")
e = t["token_embd.weight"]
emb = gguf.quants.dequantize(e.data, e.tensor_type)
emb[:300].astype(np.float32).tofile(sys.argv[2] + "/emb.f32")
)PY";

TEST_F(GgufPython, SmolLM2TensorsMatchTheGgufPackage) {
  SKIP_WITHOUT_SMOLLM2(path);
  run_python(kSmolTensorScript, shell_quote(path.string()) + " " + shell_quote(dir_.string()));
  const Checkpoint ck = Checkpoint::open(path);
  const std::pair<const char*, const char*> cases[] = {
      {"model.layers.7.self_attn.k_proj.weight", "k.f32"}, {"model.embed_tokens.weight", "emb.f32"}};
  for (const auto& [name, file] : cases) {
    SCOPED_TRACE(name);
    const std::vector<float> got = ck.tensor(name).to_floats();
    const std::vector<uint32_t> want = read_u32s(dir_ / file);
    ASSERT_GE(got.size(), want.size());
    ASSERT_GT(want.size(), 100000u);
    size_t mismatches = 0;
    for (size_t i = 0; i < want.size(); ++i) mismatches += std::bit_cast<uint32_t>(got[i]) != want[i];
    EXPECT_EQ(mismatches, 0u);
  }
}

TEST(GgufSmolLM2, GreedyDecodeGivesTheReadmeContinuation) {
  SKIP_WITHOUT_SMOLLM2(path);
  // "What is the capital of France?" in the chat template (README); fp64 numpy gives
  // "The capital of France is Paris." and eos.
  const std::string prompt =
      "1,9690,198,2683,359,253,5356,5646,11173,3365,3511,308,34519,28,7018,411,407,19712,8182,2,"
      "198,1,4093,198,1780,314,260,3575,282,4649,47,2,198,1,520,9531,198";
  const auto r = run_amk("run " + shell_quote(path.string()) + " --device cpu --prompt-ids " +
                         prompt + " -n 8");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string want = "504,3575,282,4649,314,7042,30,2\n";
  ASSERT_GE(r.out.size(), want.size()) << r.out;
  EXPECT_EQ(r.out.substr(r.out.size() - want.size()), want) << r.out;
}

}  // namespace
}  // namespace amk

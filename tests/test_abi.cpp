// The ABI header against the IR: codes, names and caps must agree. The static_asserts in
// src/ir/ir.cpp pin the codes by identifier; this test reads abi.h as TEXT so a renamed
// enumerator (a JSON name drifting from its ABI name) fails too.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "amk/abi.h"
#include "amk/ir.h"

namespace amk {
namespace {

std::map<std::string, int> enumerators_with_prefix(const std::string& text, const std::string& prefix) {
  std::map<std::string, int> out;
  const std::regex re("\\b" + prefix + "([A-Z0-9_]+)\\s*=\\s*([0-9]+)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it)
    out[(*it)[1].str()] = std::stoi((*it)[2].str());
  return out;
}

std::string abi_text() {
  std::ifstream in(AMK_SOURCE_DIR "/include/amk/abi.h");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Abi, HeaderTextMatchesIrNamesAndCodes) {
  const std::string text = abi_text();
  ASSERT_FALSE(text.empty());
  const auto ops = enumerators_with_prefix(text, "AMK_OP_");
  ASSERT_EQ(ops.at("COUNT"), kNumOps);
  for (int i = 0; i < kNumOps; ++i) EXPECT_EQ(ops.at(std::string(name_of(Op{i}))), i);
  const auto dtypes = enumerators_with_prefix(text, "AMK_DTYPE_");
  for (int i = 0; i < kNumDTypes; ++i) EXPECT_EQ(dtypes.at(std::string(name_of(DType{i}))), i);
  const auto kinds = enumerators_with_prefix(text, "AMK_BUF_");
  for (int i = 0; i < kNumBufferKinds; ++i)
    EXPECT_EQ(kinds.at(std::string(name_of(BufferKind{i}))), i);
  const auto spaces = enumerators_with_prefix(text, "AMK_MEM_");
  for (int i = 0; i < kNumMemSpaces; ++i)
    EXPECT_EQ(spaces.at(std::string(name_of(MemSpace{i}))), i);
}

TEST(Abi, VersionAndCaps) {
  EXPECT_EQ(std::to_string(AMK_ABI_VERSION_MAJOR) + "." + std::to_string(AMK_ABI_VERSION_MINOR),
            std::string(kAbiVersion));
  EXPECT_EQ(AMK_MAX_INPUTS, 8);
  EXPECT_EQ(AMK_MAX_OUTPUTS, 4);
  EXPECT_EQ(AMK_MAX_WAITS, 8);
  EXPECT_EQ(AMK_MAX_RANK, 4);
}

TEST(Abi, ParamsStructFollowsParamFieldsOrder) {
  // amk_params_t lays the int32 PARAM_FIELDS out in spec order, then the floats: the n-th field
  // sits at byte 4n. Check a few by name through offsetof.
  const auto& f = param_fields();
  auto index_of = [&](std::string_view n) {
    for (size_t i = 0; i < f.size(); ++i)
      if (f[i].name == n) return static_cast<size_t>(i);
    return f.size();
  };
  EXPECT_EQ(offsetof(amk_params_t, K), 4 * index_of("K"));
  EXPECT_EQ(offsetof(amk_params_t, n_kv_heads), 4 * index_of("n_kv_heads"));
  EXPECT_EQ(offsetof(amk_params_t, pos), 4 * index_of("pos"));
  EXPECT_EQ(offsetof(amk_params_t, group), 4 * index_of("group"));
  EXPECT_EQ(offsetof(amk_params_t, eps), 4 * index_of("eps"));
  EXPECT_EQ(offsetof(amk_params_t, theta), 4 * index_of("theta"));
  EXPECT_EQ(offsetof(amk_params_t, kv_stride), 4 * index_of("kv_stride"));
  // Three reserved words after the floats keep a task record's descriptors 16-byte aligned.
  EXPECT_EQ(sizeof(amk_params_t), 4 * f.size() + 12);
}

}  // namespace
}  // namespace amk

// Opening a GGUF file as a Checkpoint: the config from its metadata, every tensor dequantised
// once into an owned buffer under its Hugging Face name and shape.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "amk/checkpoint.h"
#include "amk/gguf.h"
#include "amk/gguf_dequant.h"
#include "amk/gguf_model.h"
#include "model/checkpoint_checks.h"
#include "model/strict_json.h"

namespace amk {

struct GgufTensorStore {
  std::vector<TensorView> views;              // sorted by name
  std::vector<std::vector<float>> f32;        // the buffers the views point into
  std::vector<std::vector<uint16_t>> bf16;
};

namespace {

using model_detail::quote_name;

std::string shape_text(std::span<const int64_t> shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// Round to nearest even; NaN stays NaN (quiet).
uint16_t f32_to_bf16(float f) {
  const auto bits = std::bit_cast<uint32_t>(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

}  // namespace

Checkpoint Checkpoint::open_gguf(const std::filesystem::path& path) {
  const std::string where = path.string();
  const GgufFile file = GgufFile::open(path);
  const GgufContents& g = file.contents();

  Checkpoint ck;
  ck.folder_ = path;
  ck.config_ = gguf_model_config(g);
  const ModelConfig& c = ck.config_;

  GenerationConfig gen;
  if (const auto bos = g.opt_int("tokenizer.ggml.bos_token_id")) gen.bos_token_ids = {*bos};
  if (const auto eos = g.opt_int("tokenizer.ggml.eos_token_id")) gen.eos_token_ids = {*eos};
  if (const auto pad = g.opt_int("tokenizer.ggml.padding_token_id")) gen.pad_token_id = *pad;
  for (const int64_t id : gen.eos_token_ids)
    if (id < 0 || id >= c.vocab_size)
      throw CheckpointError(fmt::format("{}: tokenizer.ggml.eos_token_id {} is outside the "
                                        "vocabulary [0, {})",
                                        where, id, c.vocab_size));
  if (!gen.bos_token_ids.empty() || !gen.eos_token_ids.empty() || gen.pad_token_id)
    ck.generation_ = gen;

  // Every tensor must be one the config implies, with its shape: checked on the GGUF names and
  // dims before anything is dequantised, so a wrong file costs no memory.
  const std::vector<WeightSpec> expected = expected_weights(c);
  int64_t total_elements = 0;
  struct Planned {
    const GgufTensor* tensor;
    std::string hf_name;
    std::vector<int64_t> shape;
  };
  std::vector<Planned> plan;
  for (const GgufTensor& t : g.tensors) {
    if (t.name == "rope_freqs.weight") {
      // llama.cpp's converter stores Llama 3.1+'s rope scaling as per-frequency factors; AMK
      // takes rope scaling from the config, so only the identity is accepted.
      const std::vector<float> f = dequantize(t, where);
      if (std::any_of(f.begin(), f.end(), [](float x) { return x != 1.0f; }))
        throw UnsupportedModelError(fmt::format(
            "{}: unsupported: per-frequency rope factors (tensor 'rope_freqs.weight', the GGUF form "
            "of Llama 3.1's llama3 rope scaling); convert the Hugging Face checkpoint instead",
            where));
      continue;
    }
    const auto hf = gguf_to_hf_name(t.name);
    if (!hf)
      throw UnsupportedModelError(fmt::format("{}: unsupported: tensor {} has no counterpart in a "
                                              "Hugging Face {} model",
                                              where, quote_name(t.name), c.model_type));
    std::vector<int64_t> shape(t.dims.rbegin(), t.dims.rend());
    const auto spec = std::find_if(expected.begin(), expected.end(),
                                   [&](const WeightSpec& w) { return w.name == *hf; });
    if (spec == expected.end())
      throw CheckpointError(fmt::format("{}: tensor {} ({}) is not part of the {}-layer {} model "
                                        "the metadata describes",
                                        where, quote_name(t.name), *hf, c.num_hidden_layers,
                                        c.model_type));
    if (spec->shape != shape)
      throw CheckpointError(fmt::format("{}: tensor {} ({}) has shape {} (GGUF dims {}), expected "
                                        "{} from the metadata",
                                        where, quote_name(t.name), *hf, shape_text(shape),
                                        shape_text(t.dims), shape_text(spec->shape)));
    if (!can_dequantize(t.type))
      throw UnsupportedModelError(fmt::format("{}: unsupported: tensor {} is {}; AMK dequantises {}",
                                              where, quote_name(t.name), name_of(t.type),
                                              dequantizable_types_text()));
    total_elements += t.numel();  // bounded: the tensors fit in the file
    plan.push_back({&t, *hf, std::move(shape)});
  }
  for (const WeightSpec& w : expected)
    if (std::none_of(plan.begin(), plan.end(), [&](const Planned& p) { return p.hf_name == w.name; }))
      throw CheckpointError(fmt::format("{}: missing tensor {} (no GGUF tensor maps to it)", where,
                                        quote_name(w.name)));

  const bool as_bf16 = total_elements > kGgufMaxF32Bytes / 4;
  auto store = std::make_shared<GgufTensorStore>();
  store->views.reserve(plan.size());
  for (const Planned& p : plan) {
    std::vector<float> values = dequantize(*p.tensor, where);
    const bool is_q = p.hf_name.ends_with("q_proj.weight") || p.hf_name.ends_with("q_proj.bias");
    const bool is_k = p.hf_name.ends_with("k_proj.weight") || p.hf_name.ends_with("k_proj.bias");
    if (gguf_qk_rows_permuted(c.family) && (is_q || is_k))
      unpermute_qk_rows(values, is_q ? c.num_attention_heads : c.num_key_value_heads,
                        p.shape.size() == 2 ? p.shape[1] : 1);
    TensorView v;
    v.name = p.hf_name;
    v.shape = p.shape;
    v.file = where;
    if (as_bf16) {
      std::vector<uint16_t> b(values.size());
      std::transform(values.begin(), values.end(), b.begin(), f32_to_bf16);
      v.dtype = StDType::BF16;
      v.bytes = std::as_bytes(std::span(b));
      store->bf16.push_back(std::move(b));  // moving keeps the buffer where the view points
    } else {
      v.dtype = StDType::F32;
      v.bytes = std::as_bytes(std::span(values));
      store->f32.push_back(std::move(values));
    }
    store->views.push_back(std::move(v));
  }
  std::sort(store->views.begin(), store->views.end(),
            [](const TensorView& a, const TensorView& b) { return a.name < b.name; });
  for (size_t i = 1; i < store->views.size(); ++i)
    if (store->views[i].name == store->views[i - 1].name)
      throw CheckpointError(fmt::format("{}: two tensors map to {}", where,
                                        quote_name(store->views[i].name)));
  for (const TensorView& v : store->views) ck.index_.push_back(&v);
  ck.gguf_ = std::move(store);
  model_detail::check_config_against_tensors(ck.config_, ck.index_, where);
  return ck;
}

}  // namespace amk

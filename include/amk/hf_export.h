// A checkpoint written as a Hugging Face folder (config.json + model.safetensors), whatever it
// was read from: how a GGUF file's weights reach tools that read only HF folders (the PyTorch
// peer of `amk bench`), with the dequantised values AMK itself decodes.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>

#include "amk/checkpoint.h"
#include "amk/model_config.h"

namespace amk {

class HfExportError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// config.json text (classic format) that parse_model_config() reads back as `config`: sizes,
// heads, head_dim, eps, RoPE theta and scaling, tied embeddings, biases, the sliding window,
// bos / eos ids; torch_dtype `torch_dtype`. Throws HfExportError for a config that a config.json
// cannot express (a Llama with q/k/v biases but no o_proj bias).
std::string hf_config_json(const ModelConfig& config, const std::string& torch_dtype = "bfloat16");

// Writes config.json and one model.safetensors (every expected weight under its HF name, as
// `dtype`: BF16, F16 or F32) into `dir`, which must not exist or be empty. Throws HfExportError
// (or the checkpoint's errors for a missing tensor).
void write_hf_folder(const Checkpoint& checkpoint, const std::filesystem::path& dir, DType dtype = DType::BF16);

}  // namespace amk

// Published model shapes, as config.json text, for `amk make-model`: real weights cannot be
// downloaded here, so checkpoints of the real shapes are made with random weights instead.
// Each config is the model's published Hugging Face config.json in the classic format
// (`rope_theta`, `rope_scaling`, `torch_dtype`), with torch_dtype set to the requested dtype.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace amk {

// "llama-3.2-1b", "llama-3.1-8b", "qwen3-0.6b", "qwen3-1.7b", "qwen3-8b", "qwen2.5-0.5b",
// "smollm2-135m", "tiny".
const std::vector<std::string_view>& model_preset_names();

// config.json of preset `name` with torch_dtype `torch_dtype` ("bfloat16", "float16",
// "float32"). Throws std::invalid_argument naming the known presets for an unknown name.
std::string model_preset_config(std::string_view name, std::string_view torch_dtype);

// generation_config.json for the same preset (its bos/eos ids, greedy by default).
std::string model_preset_generation_config(std::string_view name);

}  // namespace amk

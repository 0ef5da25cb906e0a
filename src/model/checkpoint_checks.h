// The whole-checkpoint consistency check shared by the safetensors folder and the GGUF file.
#pragma once

#include <string>
#include <vector>

#include "amk/model_config.h"
#include "amk/safetensors.h"

namespace amk::model_detail {

// The config must describe the tensors `index` (sorted by name) holds: num_hidden_layers against
// the model.layers.N names, vocab/hidden/heads x head_dim/kv heads/intermediate against the
// tensors that carry them. Each mismatch is a ModelConfigError "<where>: <field> ...".
void check_config_against_tensors(const ModelConfig& c, const std::vector<const TensorView*>& index,
                                  const std::string& where);

}  // namespace amk::model_detail

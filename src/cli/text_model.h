// What the text commands (generate, chat, perplexity) share: a model opened with its tokenizer
// and template, a decoder on the chosen device, Ctrl-C handling and terminal progress. Failures
// print one message naming the problem and give nullopt / false (the command exits 2).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "amk/checkpoint.h"
#include "amk/decoder.h"
#include "amk/model_text.h"

namespace amk::cli {

// --device: "auto" (the CUDA VM when a usable GPU exists, else the CPU), "cpu", "cuda", "cuda:N".
struct DeviceChoice {
  bool cuda = false;
  int index = 0;
  std::string name() const { return cuda ? "cuda:" + std::to_string(index) : "cpu"; }
};
std::optional<DeviceChoice> resolve_text_device(const std::string& device);

struct TextModel {
  ModelText text;
  Checkpoint checkpoint;
  DeviceChoice device;
  std::unique_ptr<Decoder> decoder;
  // The ids that end a generation: the checkpoint's (generation_config.json list, config.json,
  // GGUF's eos) and the tokenizer side's (tokenizer_config.json's eos_token, GGUF's eot).
  std::vector<int64_t> eos_ids;
};

// The model's text side only (tokenizer, template): for commands that need no weights yet.
std::optional<ModelText> open_model_text(const std::string& model);

// The checkpoint (a folder or .gguf), lowered for a context of `context` tokens (capped at the
// model's positions: the cap is reported through `*context`), and a decoder on `device`.
std::optional<TextModel> open_text_model(const std::string& model, ModelText text, const DeviceChoice& device,
                                         int64_t* context);

// Ctrl-C sets the returned flag instead of killing the process (installed once; the commands
// check it between decode steps). A second Ctrl-C while the flag is still set exits at once.
std::atomic<bool>& install_interrupt_flag();

// Progress for long work, on stderr only when it is a terminal ("\r" updates, cleared by
// progress_done); nothing in pipes and files.
bool stderr_is_terminal();
void progress(const std::string& line);
void progress_done();

}  // namespace amk::cli

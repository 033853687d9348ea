// Model weights from where a trained model lives, for everything that runs one (`tern serve`, `tern
// generate`, and the model registry, which resolves a name to one of these paths):
//
//  * a run directory: model.safetensors (written by `tern train` / `tern export`) plus tokenizer.model;
//  * a checkpoint (docs/checkpoints.md): a step directory such as RUN/checkpoints/step_00001200, local or
//    s3://, whose tensors.safetensors holds tern's tensors.
#pragma once

#include <string>
#include <vector>

#include "ckpt/safetensors_image.h"
#include "core/status.h"
#include "model/gpt_config.h"
#include "model/lora.h"

namespace tern {

struct ModelWeights {
  GptConfig config;
  std::vector<float> params;   // GptParamLayout order
  std::string tokenizer_path;  // the tokenizer.model that goes with them
  std::string name;            // a model name for the API: the run directory's (or checkpoint's) base name
};

// tokenizer: a tokenizer.model to use instead of the one found next to the weights (needed for a checkpoint
// outside its run directory, e.g. on S3). need_tokenizer false: a source without one is no error, and
// tokenizer_path stays empty (train.init_from checks the tokenizer only when there is one).
Result<ModelWeights> LoadModelWeights(const std::string& path, const std::string& tokenizer = "",
                                      bool need_tokenizer = true);

// A checkpoint's model as saved: shape, LoRA spec (rank 0 without) and the parameters, base then adapters
// (GptParamLayout + LoraParamLayout), not merged.
struct CheckpointModel {
  GptConfig config;
  LoraSpec lora;
  std::vector<float> params;
  // The weights every reader gets: with LoRA the adapters merged in (MergeLoraOnHost), else params as they
  // are (moved out).
  std::vector<float> TakeMergedParams();
};
// Copies each tensor of `layout` (fp32, exactly its size) from st into out + its offset; Corruption naming
// `where` and the tensor when one is missing, of another dtype or size.
Status ReadF32Tensors(const ckpt::ParsedSafetensors& st, const std::vector<ParamTensor>& layout,
                      const std::string& where, float* out);
Result<CheckpointModel> ModelFromCheckpointTensors(const ckpt::ParsedSafetensors& st,
                                                   const std::string& where);
// Loads the checkpoint at `path` (a step directory, local or s3://); *location (if given) gets where it was
// found.
Result<CheckpointModel> LoadCheckpointModel(const std::string& path, std::string* location = nullptr);

// A checkpoint's tensors.safetensors (parsed) -> its model shape (tern.* metadata) and base weights
// (GptParamLayout). A LoRA run's checkpoint (tern.lora_* metadata) also holds the adapters: they are merged
// into the weights (MergeLoraOnHost), so every reader gets the adapted model. `where` names the file in
// errors.
Result<ModelWeights> WeightsFromCheckpointTensors(const ckpt::ParsedSafetensors& st,
                                                  const std::string& where);

}  // namespace tern

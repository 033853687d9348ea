// train.init_from (docs/finetune.md): the weights a fresh run starts from instead of random ones, for
// fine-tuning and continued pretraining, as nanoGPT's init_from and PyTorch's load_state_dict before the
// first step. The optimizer state, step count and learning-rate schedule start fresh; only the weights come
// from the source.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "data/tokenizer.h"
#include "model/gpt_config.h"

namespace tern {

struct InitWeights {
  std::vector<float> params;  // in GptParamLayout(model) order
  std::string source;         // what was loaded (the run directory or checkpoint)
  std::string note;           // said once on stderr by rank 0: e.g. a cropped position table
};

// Loads the weights at `path` (a run directory, a checkpoint step directory or tier root, local or s3://;
// infer/weights.h) for `*model`, which must have its shape: the same n_layer, n_head, n_embd and vocab_size
// (a vocab_size of 0 is taken from the source), and a block_size no larger than the source's (the position
// table is cropped to it). `data_tokenizer` (data.dir's) must be the one the source was trained with when the
// source has a tokenizer.model beside it; a source without one (a checkpoint on S3) is taken unchecked, with
// a note. Errors name what differs and the fix.
Result<InitWeights> LoadInitWeights(const std::string& path, const Tokenizer& data_tokenizer,
                                    const std::string& data_dir, GptConfig* model);

}  // namespace tern

#include "train/init_from.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "infer/weights.h"

namespace tern {

namespace {

// "n_layer 6 (the source has 4)" for each model key that differs, and the --set flags that fix them.
Status ShapeMismatch(const std::string& path, const GptConfig& want, const GptConfig& src) {
  std::string what, fix;
  auto check = [&](const char* key, int mine, int theirs) {
    if (mine == theirs) return;
    what += fmt::format("{}model.{} is {} (the source's is {})", what.empty() ? "" : ", ", key, mine, theirs);
    fix += fmt::format(" --set model.{}={}", key, theirs);
  };
  check("n_layer", want.n_layer, src.n_layer);
  check("n_head", want.n_head, src.n_head);
  check("n_embd", want.n_embd, src.n_embd);
  check("vocab_size", want.vocab_size, src.vocab_size);
  if (want.block_size > src.block_size) {
    what += fmt::format(
        "{}model.block_size is {}, longer than the source's {} (its positions past {} were "
        "never trained)",
        what.empty() ? "" : ", ", want.block_size, src.block_size, src.block_size);
    fix += fmt::format(" --set model.block_size={}", src.block_size);
  }
  return Status::InvalidArgument(fmt::format(
      "train.init_from {}: the config's model is not the source's: {}. Describe the source's model:{} (or "
      "copy the model section of its config.yaml)",
      path, what, fix));
}

}  // namespace

Result<InitWeights> LoadInitWeights(const std::string& path, const Tokenizer& data_tokenizer,
                                    const std::string& data_dir, GptConfig* model) {
  auto loaded = LoadModelWeights(path, /*tokenizer=*/"", /*need_tokenizer=*/false);
  if (!loaded.ok()) return loaded.status().WithContext("train.init_from " + path);
  ModelWeights& w = *loaded;
  const GptConfig& src = w.config;
  if (model->vocab_size == 0) model->vocab_size = src.vocab_size;
  if (model->n_layer != src.n_layer || model->n_head != src.n_head || model->n_embd != src.n_embd ||
      model->vocab_size != src.vocab_size || model->block_size > src.block_size)
    return ShapeMismatch(path, *model, src);

  InitWeights out;
  out.source = path;
  if (w.tokenizer_path.empty()) {
    out.note = fmt::format(
        "no tokenizer.model beside it, so nothing checks that {} was prepared with the tokenizer it was "
        "trained with",
        data_dir);
  } else {
    auto tok = Tokenizer::Load(w.tokenizer_path);
    if (!tok.ok()) return tok.status().WithContext("train.init_from " + path + ": its tokenizer");
    if (tok->fingerprint() != data_tokenizer.fingerprint()) {
      return Status::InvalidArgument(fmt::format(
          "train.init_from {} was trained with tokenizer {} ({}), but data.dir {} was prepared with another "
          "({}): the same ids would mean other text. Prepare the data with the model's tokenizer: tern "
          "prepare "
          "--input TEXT --out DIR --tokenizer {}",
          path, tok->fingerprint(), w.tokenizer_path, data_dir, data_tokenizer.fingerprint(), path));
    }
  }

  // Tensor by tensor into this config's layout: every tensor has the source's shape but the position table,
  // whose first block_size rows are kept.
  const std::vector<ParamTensor> from = GptParamLayout(src);
  out.params.resize(GptParamCount(*model));
  for (const ParamTensor& t : GptParamLayout(*model)) {
    const auto it =
        std::find_if(from.begin(), from.end(), [&](const ParamTensor& f) { return f.name == t.name; });
    if (it == from.end() || it->numel < t.numel)  // a bug: the shapes were checked above
      return Status::Internal(fmt::format("train.init_from {}: tensor {} does not fit", path, t.name));
    std::memcpy(out.params.data() + t.offset, w.params.data() + it->offset, t.numel * sizeof(float));
  }
  if (model->block_size < src.block_size) {
    const std::string crop = fmt::format("the position table is cropped from {} to the config's {} rows",
                                         src.block_size, model->block_size);
    out.note = out.note.empty() ? crop : out.note + "; " + crop;
  }
  return out;
}

}  // namespace tern

#include "train/trainer_state.h"

#include <nlohmann/json.hpp>

namespace tern {

Result<SavedTrainerState> ParseTrainerState(std::string_view text, const std::string& location) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("format") || j["format"] != "tern-trainer-state")
    return Status::Corruption(fmt::format("{}/trainer.json is not tern trainer state", location));
  // Counts must be whole numbers: nlohmann converts a double to an integer with undefined behaviour when it
  // is out of range (1e300 as "step").
  const auto whole = [](const nlohmann::json& o, const char* key) {
    return !o.is_object() || !o.contains(key) || o[key].is_number_integer() || !o[key].is_number();
  };
  const auto sub = [&](const char* key) { return j.contains(key) ? j[key] : nlohmann::json::object(); };
  for (const auto& [obj, key] : {std::pair{j, "step"},
                                 {j, "tokens_seen"},
                                 {j, "adam_t"},
                                 {sub("data"), "train_tokens"},
                                 {sub("data"), "train_windows"},
                                 {sub("loader"), "epoch"},
                                 {sub("loader"), "index"},
                                 {sub("loss_scale"), "good_steps"},
                                 {sub("loss_scale"), "skipped_steps"}})
    if (!whole(obj, key))
      return Status::Corruption(
          fmt::format("{}/trainer.json: '{}' is not a whole number; the file was not "
                      "written by tern or was damaged: resume from another checkpoint",
                      location, key));
  SavedTrainerState out;
  // A field of the wrong type (or a section that is not an object) makes nlohmann throw: Corruption.
  try {
    const auto& saved = j["config"];
    for (auto it = saved.begin(); it != saved.end(); ++it)
      out.config[it.key()] = it.value().get<std::string>();
    out.tokenizer = j.value("tokenizer", "");
    const auto& d = j["data"];
    out.train_tokens = d.value("train_tokens", uint64_t{0});
    out.train_windows = d.value("train_windows", uint64_t{0});
    out.train_content = d.value("content", "");

    TrainProgress& p = out.progress;
    p.step = j.value("step", 0);
    p.tokens_seen = j.value("tokens_seen", uint64_t{0});
    p.train_seconds = j.value("train_seconds", 0.0);
    p.loader.epoch = j["loader"].value("epoch", uint64_t{0});
    p.loader.index = j["loader"].value("index", uint64_t{0});
    p.adam_t = j.value("adam_t", p.step);
    if (j.contains("loss_scale") && j["loss_scale"].is_object()) {
      const auto& ls = j["loss_scale"];
      LossScaler::State state;
      state.scale = ls.value("scale", state.scale);
      state.good_steps = ls.value("good_steps", 0);
      state.skipped_steps = ls.value("skipped_steps", int64_t{0});
      if (!(state.scale > 0))
        return Status::Corruption(fmt::format("{}/trainer.json: loss_scale.scale is not positive", location));
      p.loss_scale = state;
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::Corruption(fmt::format(
        "{}/trainer.json: a field is missing or has the wrong type ({}); the file was not written by tern or "
        "was damaged: resume from another checkpoint",
        location, e.what()));
  }
  return out;
}

}  // namespace tern

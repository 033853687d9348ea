#include "data/prepare_manifest.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "data/loader.h"

namespace tern {

namespace {

// A shard's name as a dataset's file: no folder, nothing a path could escape with.
bool PlainFileName(const std::string& name) {
  return !name.empty() && name.find('/') == std::string::npos && name.find('\0') == std::string::npos &&
         name[0] != '.' && name.size() > 4 && name.ends_with(".bin");
}

}  // namespace

Result<PreparedManifest> ParsePreparedManifest(const std::string& text, const std::string& where) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  // find(), not value(): value() throws on a field of another type, and these bytes are input.
  const auto format = j.find("format");
  if (!j.is_object() || format == j.end() || !format->is_string() || *format != "tern-prepare")
    return Status::Corruption(fmt::format("{} is not a tern prepare summary", where));
  PreparedManifest m;
  m.chat = j.contains("chat");
  const auto vocab = j.find("vocab_size");
  if (vocab == j.end() || !vocab->is_number_integer() || vocab->get<int64_t>() <= 0 ||
      vocab->get<int64_t>() > (int64_t{1} << 30))
    return Status::Corruption(fmt::format("{} records no vocab_size", where));
  m.vocab_size = static_cast<int>(vocab->get<int64_t>());
  const auto shards = j.find("shards");
  if (shards == j.end() || !shards->is_object())
    return Status::InvalidArgument(
        fmt::format("{} lists no shards (written by an older tern): prepare the data again", where));
  m.files = {"tokenizer.model", "tokenizer.vocab"};
  for (const char* split : {"train", "val"}) {
    const auto list = shards->find(split);
    if (list == shards->end()) continue;
    if (!list->is_array())
      return Status::Corruption(fmt::format("{}: shards.{} is not a list", where, split));
    for (const auto& n : *list) {
      if (!n.is_string() || !PlainFileName(n.get_ref<const std::string&>()))
        return Status::Corruption(fmt::format("{}: shards.{} holds a bad name", where, split));
      const std::string& shard = n.get_ref<const std::string&>();
      m.files.insert(shard);
      // A chat dataset trains on its replies only by its loss masks: one per shard, all required.
      if (m.chat) m.files.insert(MaskPathFor(shard));
    }
  }
  const auto tokens = j.find("tokens");
  if (tokens != j.end() && tokens->is_object())
    for (const char* split : {"train", "val"}) {
      const auto n = tokens->find(split);
      if (n != tokens->end() && n->is_number_unsigned() && n->get<uint64_t>() < (uint64_t{1} << 48))
        m.shard_bytes += n->get<uint64_t>() * (m.vocab_size > 65536 ? 4 : 2);
    }
  return m;
}

}  // namespace tern

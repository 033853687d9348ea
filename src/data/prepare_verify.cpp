// `tern prepare --verify DIR`: reads every shard of a prepared dataset and checks it against what tern
// prepare recorded (each shard's header hash, prepare.json's token counts and content).
#include <fmt/format.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/file_util.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "data/shard.h"

namespace tern {

Result<VerifySummary> VerifyPrepared(const std::string& dir, FILE* progress) {
  const std::string summary = dir + "/prepare.json";
  TERN_ASSIGN_OR_RETURN(std::string text, ReadFileToString(summary));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  const auto format = j.find("format");  // not value(): it throws on a "format" that is not a string
  if (!j.is_object() || format == j.end() || !format->is_string() || *format != "tern-prepare")
    return Status::Corruption(fmt::format("{} is not a tern prepare summary; re-run tern prepare", summary));
  VerifySummary out;
  const char* splits[2] = {"train", "val"};
  uint64_t promised[2] = {0, 0};
  std::string recorded_content[2];
  try {  // a field of the wrong type throws
    for (int s = 0; s < 2; ++s) {
      if (j.contains("tokens")) promised[s] = j.at("tokens").value(splits[s], uint64_t{0});
      if (j.contains("content")) recorded_content[s] = j.at("content").value(splits[s], "");
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::Corruption(fmt::format("{}: {}; re-run tern prepare", summary, e.what()));
  }
  for (int s = 0; s < 2; ++s) {
    const uint64_t want = promised[s];
    auto found = FindShards(dir, splits[s]);
    if (!found.ok() && want > 0) return found.status();
    const std::vector<std::string> paths = found.ok() ? *found : std::vector<std::string>{};
    std::vector<uint64_t> hashes, masks;
    uint64_t tokens = 0;
    for (const auto& path : paths) {
      TERN_ASSIGN_OR_RETURN(ShardReader r, ShardReader::Open(path));
      if (r.content_xxh3() == 0) {
        out.unrecorded++;
      } else {
        TERN_RETURN_IF_ERROR(r.VerifyContent());
      }
      hashes.push_back(r.content_xxh3());
      tokens += r.size();
      out.shards++;
      uint64_t mask_hash = 0;
      if (std::error_code ec; std::filesystem::exists(MaskPathFor(path), ec)) {
        TERN_ASSIGN_OR_RETURN(ShardReader m, ShardReader::Open(MaskPathFor(path)));
        TERN_RETURN_IF_ERROR(m.VerifyContent());
        if (m.size() != r.size())
          return Status::Corruption(
              fmt::format("{} has {} values for the {} tokens of {}; re-run tern prepare", m.path(), m.size(),
                          r.size(), path));
        mask_hash = m.content_xxh3();
        out.shards++;
      }
      masks.push_back(mask_hash);
      if (progress) std::fprintf(progress, "\rverify: %zu shards checked", out.shards);
    }
    if (tokens != want)
      return Status::Corruption(
          fmt::format("the {} shards in {} hold {} tokens, prepare.json says {}: shards are missing or were "
                      "added; re-run tern prepare",
                      splits[s], dir, tokens, want));
    out.tokens[s] = tokens;
    out.content[s] = ShardsFingerprint(hashes, masks);
    const std::string& recorded = recorded_content[s];
    if (!recorded.empty() && recorded != out.content[s])
      return Status::Corruption(
          fmt::format("the {} shards in {} are not the ones tern prepare wrote (content {}, prepare.json "
                      "says {}): shards were replaced or reordered; re-run tern prepare",
                      splits[s], dir, out.content[s].empty() ? "unrecorded" : out.content[s], recorded));
  }
  if (progress) std::fprintf(progress, "\n");
  return out;
}

}  // namespace tern

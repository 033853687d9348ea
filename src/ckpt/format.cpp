#include "ckpt/format.h"

#include <xxhash.h>

#include <chrono>
#include <ctime>
#include <set>

namespace tern::ckpt {

namespace {

std::string NowUtc() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The checks that need the bytes of one file: size, checksum, and that the format parses.
void CheckFile(const ManifestFile& f, const std::string& bytes, std::vector<std::string>* problems) {
  if (bytes.size() != f.bytes) {
    problems->push_back(fmt::format("{}: {} bytes, manifest says {} ({})", f.name, bytes.size(), f.bytes,
                                    bytes.size() < f.bytes ? "truncated" : "grew"));
    return;
  }
  const std::string sum = Xxh3Hex(bytes);
  if (sum != f.xxh3) {
    problems->push_back(
        fmt::format("{}: xxh3 {} but manifest says {} (corrupted: a byte changed)", f.name, sum, f.xxh3));
    return;
  }
  if (f.name.ends_with(".safetensors")) {
    auto p = ParseSafetensors(bytes);
    if (!p.ok()) problems->push_back(fmt::format("{}: {}", f.name, p.status().message()));
  } else if (f.name.ends_with(".json")) {
    if (nlohmann::json::parse(bytes, nullptr, false).is_discarded())
      problems->push_back(fmt::format("{}: not valid JSON", f.name));
  }
}

VerifyReport Check(Storage& storage, const std::string& dir, std::map<std::string, std::string>* keep,
                   const FileFilter& want = {}) {
  VerifyReport r;
  r.dir = dir;
  r.step = ParseStepDirName(dir).value_or(-1);
  auto text = storage.Get(JoinKey(dir, kManifestName));
  if (!text.ok()) {
    r.problems.push_back(text.status().code() == Status::Code::kNotFound
                             ? std::string("manifest.json missing (the save never finished: debris)")
                             : "manifest.json unreadable: " + text.status().message());
    return r;
  }
  auto m = Manifest::Parse(*text);
  if (!m.ok()) {
    r.problems.push_back("manifest.json: " + m.status().message());
    return r;
  }
  if (m->step != r.step)
    r.problems.push_back(fmt::format("manifest.json says step {} inside {}", m->step, dir));
  for (const auto& f : m->files) {
    if (want && !want(f.name)) continue;
    auto bytes = storage.Get(JoinKey(dir, f.name));
    if (!bytes.ok()) {
      r.problems.push_back(bytes.status().code() == Status::Code::kNotFound
                               ? fmt::format("{}: missing (the manifest lists it)", f.name)
                               : fmt::format("{}: {}", f.name, bytes.status().message()));
      continue;
    }
    CheckFile(f, *bytes, &r.problems);
    if (keep) (*keep)[f.name] = std::move(*bytes);
  }
  r.manifest = std::move(*m);
  r.ok = r.problems.empty();
  return r;
}

}  // namespace

std::string StepDirName(int64_t step) {
  return fmt::format("step_{:08d}", step);
}

std::optional<int64_t> ParseStepDirName(const std::string& name) {
  if (!name.starts_with("step_") || name.size() <= 5 || name.size() > 5 + 18) return std::nullopt;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); i++) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

std::string Xxh3Hex(std::string_view data) {
  return fmt::format("{:016x}", XXH3_64bits(data.data(), data.size()));
}

uint64_t Manifest::total_bytes() const {
  uint64_t n = 0;
  for (const auto& f : files) n += f.bytes;
  return n;
}

std::string Manifest::ToJson() const {
  nlohmann::ordered_json j;
  j["format"] = kManifestFormat;
  j["version"] = kFormatVersion;
  j["step"] = step;
  j["kind"] = kind;
  j["created_utc"] = created_utc;
  j["config_fingerprint"] = config_fingerprint;
  j["tokenizer"] = tokenizer;
  j["val_loss"] = val_loss ? nlohmann::ordered_json(*val_loss) : nlohmann::ordered_json();
  j["files"] = nlohmann::ordered_json::array();
  for (const auto& f : files) j["files"].push_back({{"name", f.name}, {"bytes", f.bytes}, {"xxh3", f.xxh3}});
  j["extra"] = extra.is_null() ? nlohmann::json::object() : extra;
  return j.dump(2) + "\n";
}

Result<Manifest> Manifest::Parse(std::string_view json) {
  auto j = nlohmann::json::parse(json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::Corruption("not valid JSON");
  if (!j.contains("format") || j["format"] != kManifestFormat)
    return Status::Corruption("not a tern checkpoint manifest");
  if (j.contains("version") && !j["version"].is_number_integer())
    return Status::Corruption("\"version\" is not an integer: not a manifest tern wrote");
  if (j.value("version", 0) > kFormatVersion) {
    return Status::InvalidArgument(fmt::format("format version {} is newer than this tern ({}); upgrade tern",
                                               j.value("version", 0), kFormatVersion));
  }
  Manifest m;
  // Whole numbers only: nlohmann converts a double to an integer with undefined behaviour when out of range.
  if (!j.contains("step") || !j["step"].is_number_integer())
    return Status::Corruption("\"step\" is missing or not an integer: not a manifest tern wrote");
  if (j.contains("files") && j["files"].is_array())
    for (const auto& f : j["files"])
      if (!f.is_object() || !f.contains("bytes") || !f["bytes"].is_number_unsigned())
        return Status::Corruption(
            "a file entry's \"bytes\" is missing or not a whole number: not a manifest tern wrote");
  try {
    m.step = j.at("step").get<int64_t>();
    m.kind = j.value("kind", "");
    m.created_utc = j.value("created_utc", "");
    m.config_fingerprint = j.value("config_fingerprint", "");
    m.tokenizer = j.value("tokenizer", "");
    if (j.contains("val_loss") && j["val_loss"].is_number()) m.val_loss = j["val_loss"].get<double>();
    for (const auto& f : j.at("files"))
      m.files.push_back(
          {f.at("name").get<std::string>(), f.at("bytes").get<uint64_t>(), f.at("xxh3").get<std::string>()});
    m.extra = j.value("extra", nlohmann::json::object());
  } catch (const nlohmann::json::exception& e) {
    return Status::Corruption(std::string("missing or mistyped field: ") + e.what());
  }
  return m;
}

uint64_t Snapshot::bytes() const {
  uint64_t n = 0;
  for (const auto& [name, img] : images) n += img->bytes().size();
  for (const auto& [name, text] : small_files) n += text.size();
  return n;
}

Result<PersistStats> PersistSnapshot(Snapshot& snap, Storage& storage) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string dir = StepDirName(snap.step);
  PersistStats stats;
  stats.location = JoinKey(storage.uri(), dir);
  Manifest& m = snap.manifest;
  m.step = snap.step;
  m.created_utc = NowUtc();
  m.files.clear();
  std::vector<std::pair<std::string, std::string_view>> files;
  for (const auto& [name, img] : snap.images) files.emplace_back(name, img->bytes());
  for (const auto& [name, text] : snap.small_files) files.emplace_back(name, text);
  // Re-saving a step (a retry, or debris of a crashed save): unpublish first, so no manifest ever
  // describes files that are being replaced.
  const std::string manifest_key = JoinKey(dir, kManifestName);
  Status st;
  Result<bool> had_manifest = storage.Exists(manifest_key);
  if (!had_manifest.ok()) st = had_manifest.status();
  if (st.ok() && *had_manifest) {
    st = storage.Delete(manifest_key);
    if (st.ok()) st = storage.SyncDir(dir);
  }
  size_t attempted = 0;  // the files this save (may have) written, removed again on failure
  for (const auto& [name, bytes] : files) {
    if (!st.ok()) break;
    m.files.push_back({name, bytes.size(), Xxh3Hex(bytes)});
    attempted++;
    st = storage.Put(JoinKey(dir, name), bytes);
    if (st.ok()) stats.bytes += bytes.size();
  }
  if (st.ok()) st = storage.SyncDir(dir);  // the data must be durable before the manifest can claim it
  // Data parallel: the other ranks' files, durable too (a barrier), whatever happened here.
  if (snap.gather_files) {
    Result<std::vector<ManifestFile>> others = snap.gather_files(storage, st);
    if (st.ok() && !others.ok()) st = others.status();
    if (st.ok()) m.files.insert(m.files.end(), others->begin(), others->end());
  }
  if (st.ok()) {
    const std::string text = m.ToJson();
    st = storage.Put(manifest_key, text);
    if (st.ok()) st = storage.SyncDir(dir);
    stats.bytes += text.size();
  }
  if (!st.ok()) {
    // The manifest first: its Put may have landed even though it reported a failure (an answer lost on
    // the way back), and a manifest must never outlive the files it names.
    storage.Delete(manifest_key).ok();
    for (size_t i = 0; i < attempted; i++) storage.Delete(JoinKey(dir, files[i].first)).ok();
    return st.WithContext(fmt::format("saving checkpoint step {} to {}", snap.step, stats.location));
  }
  stats.seconds = Since(t0);
  return stats;
}

Result<ManifestFile> PutCheckpointFile(Storage& storage, int64_t step, const std::string& name,
                                       std::string_view bytes) {
  const std::string dir = StepDirName(step);
  ManifestFile f{name, bytes.size(), Xxh3Hex(bytes)};
  Status st = storage.Put(JoinKey(dir, name), bytes);
  if (st.ok()) st = storage.SyncDir(dir);
  if (!st.ok())
    return st.WithContext(fmt::format("writing {} of checkpoint step {} to {}", name, step, storage.uri()));
  return f;
}

Result<std::vector<CheckpointRef>> ListCheckpoints(Storage& storage) {
  TERN_ASSIGN_OR_RETURN(auto objects, storage.List(""));
  std::map<int64_t, CheckpointRef> by_step;
  for (const auto& o : objects) {
    const size_t slash = o.key.find('/');
    if (slash == std::string::npos) continue;
    const std::string dir = o.key.substr(0, slash);
    auto step = ParseStepDirName(dir);
    if (!step) continue;
    CheckpointRef& ref = by_step[*step];
    ref.step = *step;
    ref.dir = dir;
    ref.bytes += o.size;
    if (o.key.substr(slash + 1) == kManifestName) ref.has_manifest = true;
  }
  std::vector<CheckpointRef> out;
  for (auto& [step, ref] : by_step) out.push_back(std::move(ref));
  return out;
}

VerifyReport VerifyCheckpoint(Storage& storage, const std::string& dir) {
  return Check(storage, dir, nullptr);
}

Result<LoadedCheckpoint> LoadCheckpoint(Storage& storage, const std::string& dir, const FileFilter& want) {
  LoadedCheckpoint out;
  VerifyReport r = Check(storage, dir, &out.files, want);
  out.location = JoinKey(storage.uri(), dir);
  if (!r.ok) {
    std::string msg = out.location + " is damaged:";
    for (const auto& p : r.problems) msg += "\n    " + p;
    return Status::Corruption(msg);
  }
  out.manifest = std::move(*r.manifest);
  return out;
}

}  // namespace tern::ckpt

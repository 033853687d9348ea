#include "registry/registry.h"

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>

#include "ckpt/format.h"
#include "core/file_util.h"
#include "registry/digest.h"
#include "registry/model_uri.h"
#include "registry/signing.h"
#include "run/ledger.h"

namespace tern::registry {
namespace fs = std::filesystem;
namespace {

constexpr char kFormat[] = "tern-model";
constexpr int kFormatVersion = 1;

bool ValidName(const std::string& s) {
  if (s.empty() || s.size() > 128 || s[0] == '.' || s[0] == '-') return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') return false;
  return true;
}

bool AllDigits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

Status CheckName(const std::string& what, const std::string& s) {
  if (ValidName(s)) return Status::Ok();
  return Status::InvalidArgument(fmt::format(
      "{} '{}': use letters, digits, '-', '_' and '.' (not first), at most 128 characters", what, s));
}

}  // namespace

std::string ModelRef::ToString() const {
  if (version) return name + "@" + std::to_string(*version);
  if (!alias.empty()) return name + "@" + alias;
  return name;
}

Result<ModelRef> ParseModelRef(const std::string& text) {
  ModelRef r;
  const size_t at = text.find('@');
  r.name = text.substr(0, at);
  TERN_RETURN_IF_ERROR(CheckName("model name", r.name));
  if (at == std::string::npos) return r;
  const std::string tail = text.substr(at + 1);
  if (AllDigits(tail)) {
    r.version = std::stoi(tail);
  } else {
    TERN_RETURN_IF_ERROR(CheckName("alias", tail));
    r.alias = tail;
  }
  return r;
}

std::string DefaultRegistryLocation() {
  if (const char* r = std::getenv("TERN_REGISTRY"); r && *r) return r;
  return (fs::path(run::DefaultLedgerPath()).parent_path() / "registry").string();
}

Result<std::unique_ptr<Registry>> OpenRegistry(const std::string& location, const std::string& key_file) {
  RegistryOptions ro;
  ro.location = location.empty() ? DefaultRegistryLocation() : location;
  std::string kf = key_file;
  if (kf.empty())
    if (const char* env = std::getenv("TERN_REGISTRY_KEY_FILE"); env && *env) kf = env;
  if (!kf.empty()) {
    TERN_ASSIGN_OR_RETURN(ro.key, ReadKeyFile(kf));
  }
  auto reg = Registry::Open(ro);
  if (!reg.ok()) return reg.status().WithContext("opening the model registry " + ro.location);
  return reg;
}

std::string FormatUtc(double unix_s) {
  const auto total_ms = static_cast<int64_t>(std::floor(unix_s * 1000 + 1e-3));
  const auto secs = static_cast<time_t>(total_ms / 1000);
  const int ms = static_cast<int>(total_ms % 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:03d}Z", buf, ms);
}

Result<double> ParseUtc(const std::string& text) {
  std::tm tm{};
  int y = 0, mo = 0, d = 0, h = 0, mi = 0;
  double s = 0;
  char sep = 'T';
  const int n = std::sscanf(text.c_str(), "%4d-%2d-%2d%c%2d:%2d:%lf", &y, &mo, &d, &sep, &h, &mi, &s);
  if ((n != 3 && n < 6) || (n > 3 && sep != 'T' && sep != ' ') || mo < 1 || mo > 12 || d < 1 || d > 31)
    return Status::InvalidArgument("time '" + text +
                                   "': give a UTC time as 2026-12-02T00:40:00Z (seconds and Z optional)");
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  return static_cast<double>(timegm(&tm)) + s;
}

Result<std::unique_ptr<Registry>> Registry::Open(const RegistryOptions& o) {
  const std::string location = o.location.empty() ? DefaultRegistryLocation() : o.location;
  TERN_ASSIGN_OR_RETURN(auto store, ckpt::OpenStorage(location, o.s3));
  std::string cache = o.cache_dir;
  if (!ckpt::IsS3Uri(location)) {
    cache = location;
  } else if (cache.empty()) {
    cache = (fs::path(run::DefaultLedgerPath()).parent_path() / "registry-cache" / ckpt::Xxh3Hex(location))
                .string();
  }
  const std::string index_path = cache + "/index.sqlite";
  if (ckpt::IsS3Uri(location)) {
    // The store's copy of the index is the truth; the local file is a cache refreshed on every open.
    TERN_RETURN_IF_ERROR(MakeDirs(cache));
    auto remote = store->Get("index.sqlite");
    if (remote.ok()) {
      TERN_RETURN_IF_ERROR(WriteFileAtomic(index_path, *remote));
    } else if (remote.status().code() != Status::Code::kNotFound) {
      return remote.status().WithContext("reading the registry index from " + location);
    } else {
      std::error_code ec;
      fs::remove(index_path, ec);  // a new registry: nothing cached from another one
    }
  }
  TERN_ASSIGN_OR_RETURN(auto reg, Open(std::move(store), index_path, o));
  reg->publish_index_ = ckpt::IsS3Uri(location);
  return reg;
}

Result<std::unique_ptr<Registry>> Registry::Open(std::unique_ptr<ckpt::Storage> store,
                                                 const std::string& index_path, const RegistryOptions& o) {
  std::unique_ptr<Registry> reg(new Registry());
  reg->store_ = std::move(store);
  reg->index_path_ = index_path;
  reg->resolved_dir_ = (fs::path(index_path).parent_path() / "resolved").string();
  reg->key_ = o.key;
  reg->now_ = o.now;
  TERN_ASSIGN_OR_RETURN(reg->index_, Index::Open(index_path));
  return reg;
}

// Milliseconds: what FormatUtc prints is exactly what was recorded, so `history --at <a printed time>`
// includes the move printed with it.
double Registry::Now() const {
  using namespace std::chrono;
  const double t =
      now_ ? now_() : duration_cast<microseconds>(system_clock::now().time_since_epoch()).count() / 1e6;
  return std::floor(t * 1000 + 1e-3) / 1000;
}

std::string Registry::BlobKey(const std::string& sha256) {
  return "blobs/sha256/" + sha256;
}
std::string Registry::ManifestKey(const std::string& name, int version) {
  return fmt::format("models/{}/v{}/manifest.json", name, version);
}

Status Registry::PutBlob(const std::string& bytes, const std::string& sha256) {
  const std::string key = BlobKey(sha256);
  TERN_ASSIGN_OR_RETURN(bool exists, store_->Exists(key));
  if (exists) {  // stored once; a damaged copy is replaced by these verified bytes
    auto old = store_->Get(key);
    if (old.ok() && Sha256Hex(*old) == sha256) return Status::Ok();
  }
  return store_->Put(key, bytes);
}

Result<std::string> Registry::ReadBlob(const std::string& sha256) {
  auto bytes = store_->Get(BlobKey(sha256));
  if (!bytes.ok()) return bytes.status().WithContext("reading blob " + sha256);
  const std::string got = Sha256Hex(*bytes);
  if (got != sha256)
    return Status::Corruption(fmt::format(
        "blob {} in {} is damaged or tampered: its content hashes to {}; register the model again "
        "to repair it",
        sha256, store_->uri(), got));
  return std::move(bytes).value();
}

Status Registry::PublishIndex() {
  if (!publish_index_) return Status::Ok();
  TERN_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(index_path_));
  return store_->Put("index.sqlite", bytes).WithContext("publishing the registry index");
}

Result<Entry> Registry::Register(const ModelSource& src, const RegisterOptions& o) {
  TERN_RETURN_IF_ERROR(CheckName("model name", o.name));
  if (!o.alias.empty()) {
    TERN_RETURN_IF_ERROR(CheckName("alias", o.alias));
    if (AllDigits(o.alias)) return Status::InvalidArgument("alias '" + o.alias + "': a number is a version");
  }
  if (src.weights.empty() || src.tokenizer.empty())
    return Status::InvalidArgument(src.path + ": no weights or no tokenizer to register");
  std::string parent;
  // A run fine-tuned from a registered model (train.init_from=models:/NAME@V, pinned by `tern train`) has
  // that version as its parent unless --parent says otherwise.
  std::string parent_ref = o.parent;
  std::string init_from;
  if (src.config.is_object() && src.config.contains("train.init_from") &&
      src.config["train.init_from"].is_string())
    init_from = src.config["train.init_from"].get<std::string>();
  if (parent_ref.empty() && IsModelUri(init_from)) parent_ref = ModelUriRef(init_from);
  if (!parent_ref.empty()) {
    TERN_ASSIGN_OR_RETURN(ModelRef pref, ParseModelRef(parent_ref));
    TERN_ASSIGN_OR_RETURN(int pv, ResolveVersion(pref));
    parent = pref.name + "@" + std::to_string(pv);
  }
  // 1. The blobs, durable before anything names them.
  const std::string weights_sha = Sha256Hex(src.weights), tok_sha = Sha256Hex(src.tokenizer);
  TERN_RETURN_IF_ERROR(PutBlob(src.weights, weights_sha).WithContext("storing the weights"));
  TERN_RETURN_IF_ERROR(PutBlob(src.tokenizer, tok_sha).WithContext("storing the tokenizer"));
  const std::string adapter_sha = src.adapter.empty() ? "" : Sha256Hex(src.adapter);
  if (!src.adapter.empty())
    TERN_RETURN_IF_ERROR(PutBlob(src.adapter, adapter_sha).WithContext("storing the LoRA adapter"));
  TERN_RETURN_IF_ERROR(store_->SyncDir("blobs/sha256"));

  // 2. The version: manifest published, then the row committed, inside one index transaction.
  TERN_RETURN_IF_ERROR(index_->Begin());
  auto fail = [&](const Status& st, const std::string& manifest_key) {
    index_->Rollback();
    if (!manifest_key.empty()) (void)store_->Delete(manifest_key);
    return st;
  };
  auto latest = index_->LatestVersion(o.name);
  if (!latest.ok()) return fail(latest.status(), "");
  const int version = *latest + 1;
  const double now = Now();
  nlohmann::json m = {
      {"format", kFormat},
      {"format_version", kFormatVersion},
      {"name", o.name},
      {"version", version},
      {"created_utc", FormatUtc(now)},
      {"files",
       {{"model.safetensors", {{"sha256", weights_sha}, {"bytes", src.weights.size()}}},
        {"tokenizer.model", {{"sha256", tok_sha}, {"bytes", src.tokenizer.size()}}}}},
      {"model", src.model},
      {"config", src.config.is_null() ? nlohmann::json::object() : src.config},
      {"data", src.data},
      {"source", {{"path", src.path}, {"kind", src.kind}, {"run_dir", src.run_dir}, {"job_id", src.job_id}}},
      {"metrics", src.metrics.is_null() ? nlohmann::json::object() : src.metrics},
      {"parent", parent.empty() ? nlohmann::json(nullptr) : nlohmann::json(parent)},
      {"note", o.note}};
  if (!src.adapter.empty())  // a LoRA run: `tern serve BASE --lora models:/NAME@REF` serves it over its base
    m["files"]["adapter.safetensors"] = {{"sha256", adapter_sha}, {"bytes", src.adapter.size()}};
  if (!key_.empty()) SignManifest(&m, key_);
  const std::string text = m.dump(2) + "\n";
  const std::string mkey = ManifestKey(o.name, version);
  Status st = store_->Put(mkey, text);
  if (st.ok()) st = store_->SyncDir(fmt::format("models/{}/v{}", o.name, version));
  if (!st.ok()) return fail(st.WithContext("publishing the manifest of " + o.name), mkey);
  st = index_->InsertVersion({o.name, version, FormatUtc(now), text, Sha256Hex(text), !key_.empty()});
  if (st.ok() && !o.alias.empty()) st = index_->SetAlias(o.name, o.alias, version, now, FormatUtc(now));
  if (st.ok()) st = index_->Commit();
  if (!st.ok()) return fail(st, mkey);
  TERN_RETURN_IF_ERROR(PublishIndex());
  return Entry{o.name, version, m, !key_.empty()};
}

Result<int> Registry::ResolveVersion(const ModelRef& ref) {
  if (ref.version) {
    TERN_ASSIGN_OR_RETURN(auto row, index_->GetVersion(ref.name, *ref.version));
    if (!row)
      return Status::NotFound(
          fmt::format("{} has no version {} (see `tern models ls {}`)", ref.name, *ref.version, ref.name));
    return *ref.version;
  }
  if (!ref.alias.empty()) {
    TERN_ASSIGN_OR_RETURN(auto v, index_->AliasVersion(ref.name, ref.alias));
    if (!v)
      return Status::NotFound(fmt::format("{} has no alias '{}' (set one with `tern models alias {}@N {}`)",
                                          ref.name, ref.alias, ref.name, ref.alias));
    return *v;
  }
  TERN_ASSIGN_OR_RETURN(int latest, index_->LatestVersion(ref.name));
  if (latest == 0)
    return Status::NotFound("no model named '" + ref.name + "' in the registry " + store_->uri() +
                            " (register one with `tern models register RUN_DIR --name " + ref.name + "`)");
  return latest;
}

Result<Entry> Registry::Get(const ModelRef& ref) {
  TERN_ASSIGN_OR_RETURN(int version, ResolveVersion(ref));
  TERN_ASSIGN_OR_RETURN(auto row, index_->GetVersion(ref.name, version));
  const std::string what = fmt::format("{}@{}", ref.name, version);
  auto stored = store_->Get(ManifestKey(ref.name, version));
  if (!stored.ok()) return stored.status().WithContext("reading the manifest of " + what);
  if (Sha256Hex(*stored) != row->manifest_sha256)
    return Status::Corruption(what + ": the manifest in " + store_->uri() +
                              " differs from the one registered (its SHA-256 changed): tampered or damaged");
  nlohmann::json m = nlohmann::json::parse(*stored, nullptr, false);
  const auto format = m.find("format");  // not value(): it throws on a non-object or a non-string format
  if (m.is_discarded() || format == m.end() || !format->is_string() || *format != kFormat)
    return Status::Corruption(what + ": the manifest is not a tern-model manifest");
  TERN_RETURN_IF_ERROR(VerifyManifest(m, key_, row->signed_entry, what));
  return Entry{ref.name, version, m, row->signed_entry};
}

Result<std::vector<Entry>> Registry::List(const std::string& name) {
  TERN_ASSIGN_OR_RETURN(auto rows, index_->Versions(name));
  std::vector<Entry> out;
  for (auto& r : rows) {
    nlohmann::json m = nlohmann::json::parse(r.manifest, nullptr, false);
    out.push_back({r.name, r.version, m.is_discarded() ? nlohmann::json::object() : m, r.signed_entry});
  }
  return out;
}

Status Registry::SetAlias(const std::string& name, int version, const std::string& alias) {
  TERN_RETURN_IF_ERROR(CheckName("alias", alias));
  if (AllDigits(alias)) return Status::InvalidArgument("alias '" + alias + "': a number is a version");
  ModelRef ref{name, version, ""};
  TERN_RETURN_IF_ERROR(Get(ref).status().WithContext("checking " + ref.ToString() + " before aliasing it"));
  TERN_RETURN_IF_ERROR(index_->Begin());
  const double now = Now();
  Status st = index_->SetAlias(name, alias, version, now, FormatUtc(now));
  if (st.ok()) st = index_->Commit();
  if (!st.ok()) {
    index_->Rollback();
    return st;
  }
  return PublishIndex();
}

Result<std::vector<AliasMove>> Registry::Aliases(const std::string& name) {
  return index_->Aliases(name);
}
Result<std::vector<AliasMove>> Registry::History(const std::string& name) {
  return index_->History(name);
}

Result<std::vector<AliasMove>> Registry::AliasesAt(const std::string& name, double at_unix) {
  TERN_ASSIGN_OR_RETURN(auto moves, index_->History(name));
  std::map<std::string, AliasMove> at;
  for (const AliasMove& m : moves)
    if (m.moved_unix <= at_unix + 1e-6) at[m.alias] = m;  // at a printed (millisecond) time: included
  std::vector<AliasMove> out;
  for (auto& [alias, m] : at) out.push_back(m);
  return out;
}

Result<std::string> Registry::Materialize(const ModelRef& ref) {
  TERN_ASSIGN_OR_RETURN(Entry e, Get(ref));
  const fs::path dir = fs::path(resolved_dir_) / fmt::format("{}-v{}", e.name, e.version) / e.name;
  TERN_RETURN_IF_ERROR(MakeDirs(dir.string()));
  for (const char* file : {"model.safetensors", "tokenizer.model", "adapter.safetensors"}) {
    if (!e.manifest["files"].contains(file)) continue;  // the adapters of LoRA runs only
    const std::string sha = e.manifest["files"][file].value("sha256", "");
    TERN_ASSIGN_OR_RETURN(std::string bytes, ReadBlob(sha));
    const fs::path out = dir / file;
    auto have = ReadFileToString(out.string());
    if (have.ok() && Sha256Hex(*have) == sha) continue;
    TERN_RETURN_IF_ERROR(WriteFileAtomic(out.string(), bytes));
  }
  return dir.string();
}

}  // namespace tern::registry

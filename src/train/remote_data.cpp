// Prepared data on object storage: publish (tern prepare --out s3://) and a verified local mirror (data.dir
// s3://). See remote_data.h.
#include "train/remote_data.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "core/file_util.h"
#include "core/progress.h"
#include "data/prepare.h"
#include "data/prepare_manifest.h"
#include "train/train_config.h"

namespace tern {

namespace fs = std::filesystem;

namespace {

double ElapsedS(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A dataset's files are the plain files directly under its prefix: tokenizer.model/.vocab, the shards and
// loss masks, prepare.json. Keys with a '/' (another dataset below this one) and names a path could escape
// with are not part of it.
bool IsDatasetFile(const std::string& key) {
  return !key.empty() && key.find('/') == std::string::npos && key != "." && key != ".." && key[0] != '.';
}

// "s3://bucket/a/b/" -> "s3/bucket/a/b": the cache's folder for a store, one segment per path part.
Result<std::string> CacheFolder(const std::string& uri) {
  std::string rest = uri.substr(5);
  std::string out = "s3";
  size_t pos = 0;
  while (pos <= rest.size()) {
    size_t end = rest.find('/', pos);
    if (end == std::string::npos) end = rest.size();
    const std::string part = rest.substr(pos, end - pos);
    if (part == "." || part == "..")
      return Status::InvalidArgument(fmt::format("{}: '.' and '..' are not allowed in a data URI", uri));
    if (!part.empty()) out += "/" + part;
    pos = end + 1;
  }
  if (out == "s3")
    return Status::InvalidArgument(fmt::format("{} names no bucket: use s3://BUCKET/PREFIX", uri));
  return out;
}

// An exclusive flock on `path`, released by the destructor: the ranks of one machine (mpirun -np 8) fetch a
// dataset once; the others wait and find the copy made.
class FileLock {
 public:
  static Result<FileLock> Take(const std::string& path) {
    FileLock l;
    l.fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (l.fd_ < 0) return Status::IoError(fmt::format("cannot open the cache lock {}", path));
    if (::flock(l.fd_, LOCK_EX) != 0) return Status::IoError(fmt::format("cannot lock {}", path));
    return l;
  }
  FileLock() = default;
  FileLock(FileLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  FileLock& operator=(FileLock&&) = delete;
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the flock
  }

 private:
  int fd_ = -1;
};

// Runs task(0..n-1) on up to `parallel` threads, each task once; stops handing out tasks after the first
// error, which it returns. `done(i)` runs under one lock after task i succeeded (progress, counters).
Status RunParallel(size_t n, int parallel, const std::function<Status(size_t)>& task,
                   const std::function<void(size_t)>& done) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  Status first_error;
  auto worker = [&] {
    for (size_t i = next++; i < n; i = next++) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!first_error.ok()) return;
      }
      Status st = task(i);
      std::lock_guard<std::mutex> lock(mu);
      if (!st.ok()) {
        if (first_error.ok()) first_error = st;
        return;
      }
      done(i);
    }
  };
  std::vector<std::thread> threads;
  const int t = std::max(1, std::min<int>(parallel, static_cast<int>(n)));
  for (int k = 0; k < t; ++k) threads.emplace_back(worker);
  for (auto& th : threads) th.join();
  return first_error;
}

// Fetches `objects` from `store` into `dir` (each written whole: temp file + rename) on `parallel` threads. A
// file already in `dir` with the listed size is kept (an interrupted fetch resumes). Returns the bytes read.
Result<uint64_t> FetchAll(ckpt::Storage* store, const std::vector<ckpt::ObjectInfo>& objects,
                          const std::string& dir, int parallel, ProgressBar* bar, int* fetched) {
  std::vector<const ckpt::ObjectInfo*> todo;
  uint64_t done = 0, read = 0;
  for (const ckpt::ObjectInfo& o : objects) {
    std::error_code ec;
    const fs::path p = fs::path(dir) / o.key;
    if (fs::is_regular_file(p, ec) && fs::file_size(p, ec) == o.size) {
      done += o.size;
    } else {
      todo.push_back(&o);
    }
  }
  auto fetch = [&](size_t i) -> Status {
    const ckpt::ObjectInfo& o = *todo[i];
    Result<std::string> bytes = store->Get(o.key);
    Status st = bytes.status();
    if (st.ok() && bytes->size() != o.size)
      st = Status::Corruption(fmt::format("{}/{}: {} bytes read, the listing says {}", store->uri(), o.key,
                                          bytes->size(), o.size));
    if (st.ok()) st = WriteFileAtomic((fs::path(dir) / o.key).string(), *bytes);
    return st.ok() ? st : st.WithContext(fmt::format("fetching {}/{}", store->uri(), o.key));
  };
  TERN_RETURN_IF_ERROR(RunParallel(todo.size(), parallel, fetch, [&](size_t i) {
    read += todo[i]->size;
    done += todo[i]->size;
    ++*fetched;
    if (bar) bar->Update(done);
  }));
  return read;
}

}  // namespace

bool IsRemoteData(const std::string& dir) {
  return dir.rfind("s3://", 0) == 0;
}

std::string DefaultDataCache() {
  if (const char* c = std::getenv("TERN_DATA_CACHE"); c && *c) return c;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/tern/data";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/tern/data";
  return "/tmp/tern-data-cache";
}

Result<DataMirror> MirrorPreparedData(const std::string& uri, const DataMirrorOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  TERN_ASSIGN_OR_RETURN(const std::string folder, CacheFolder(uri));
  TERN_ASSIGN_OR_RETURN(std::unique_ptr<ckpt::Storage> store, ckpt::OpenStorage(uri, o.s3));
  auto manifest = store->Get("prepare.json");
  if (!manifest.ok()) {
    if (manifest.status().code() == Status::Code::kNotFound)
      return Status::NotFound(
          fmt::format("{} holds no prepare.json: it is not a dataset written by tern prepare (or its upload "
                      "did not finish); "
                      "publish one with `tern prepare --input TEXT --out {}`",
                      uri, uri));
    return manifest.status().WithContext(fmt::format("reading {}/prepare.json", uri));
  }
  const std::string id = fmt::format("{:016x}", XXH3_64bits(manifest->data(), manifest->size()));
  const std::string root =
      (fs::path(o.cache_dir.empty() ? DefaultDataCache() : o.cache_dir) / folder).string();
  TERN_RETURN_IF_ERROR(MakeDirs(root));
  TERN_ASSIGN_OR_RETURN(FileLock lock, FileLock::Take(root + "/.lock"));
  DataMirror m;
  m.local_dir = root + "/" + id;
  std::error_code ec;
  if (fs::is_regular_file(m.local_dir + "/prepare.json", ec)) {  // made (and verified) before: used as it is,
    for (const auto& e : fs::directory_iterator(m.local_dir, ec)) {  // whatever the store holds now
      m.bytes += e.is_regular_file(ec) ? e.file_size(ec) : 0;
      ++m.files;
    }
    m.seconds = ElapsedS(t0);
    return m;
  }
  // Only the files prepare.json names are fetched: a replaced dataset's left-overs under the prefix are not.
  TERN_ASSIGN_OR_RETURN(const PreparedManifest named,
                        ParsePreparedManifest(*manifest, uri + "/prepare.json"));
  const std::set<std::string>& wanted = named.files;
  std::set<std::string> missing = wanted;
  TERN_ASSIGN_OR_RETURN(std::vector<ckpt::ObjectInfo> listed, store->List(""));
  std::vector<ckpt::ObjectInfo> objects;
  m.bytes = manifest->size();
  m.files = 1;
  for (ckpt::ObjectInfo& x : listed) {
    if (!wanted.count(x.key)) continue;  // (a chat dataset's masks are named too)
    missing.erase(x.key);
    m.bytes += x.size;
    ++m.files;
    objects.push_back(std::move(x));
  }
  missing.erase("tokenizer.vocab");  // a convenience copy, not needed to train
  if (!missing.empty())
    return Status::NotFound(fmt::format(
        "{} lacks {} that its prepare.json names (an upload that stopped part way?): publish it again with "
        "`tern prepare --out {} --force`",
        uri, *missing.begin(), uri));
  const std::string partial = m.local_dir + ".partial";
  TERN_RETURN_IF_ERROR(MakeDirs(partial));
  std::unique_ptr<ProgressBar> bar;
  if (o.progress) bar = std::make_unique<ProgressBar>("fetch data", m.bytes, "B", o.progress);
  TERN_ASSIGN_OR_RETURN(m.fetched_bytes,
                        FetchAll(store.get(), objects, partial, o.parallel, bar.get(), &m.fetched));
  TERN_RETURN_IF_ERROR(WriteFileAtomic(partial + "/prepare.json", *manifest));
  m.fetched_bytes += manifest->size();
  ++m.fetched;
  if (bar) bar->Finish();
  auto verified = VerifyPrepared(partial);
  if (!verified.ok()) {
    // A damaged object stays in the store; nothing of this fetch is kept (the next attempt reads it all
    // again).
    fs::remove_all(partial, ec);
    return Status::Corruption(fmt::format(
        "{} failed its check after the fetch: {}. The copy in the store is damaged or was changed while it "
        "was read; publish the dataset again (tern prepare --out {} --force)",
        uri, verified.status().message(), uri));
  }
  fs::rename(partial, m.local_dir, ec);
  if (ec) return Status::IoError(fmt::format("cannot move {} to {}: {}", partial, m.local_dir, ec.message()));
  TERN_RETURN_IF_ERROR(SyncParentDir(m.local_dir));
  m.seconds = ElapsedS(t0);
  return m;
}

DataMirrorOptions DataMirrorOptionsFor(const TrainConfig& cfg, FILE* progress) {
  DataMirrorOptions o;
  o.cache_dir = cfg.data_cache_dir;
  o.s3.endpoint = cfg.ckpt.s3_endpoint;
  o.s3.region = cfg.ckpt.s3_region;
  o.progress = progress;
  return o;
}

Status AdoptIntoDataCache(const std::string& local_dir, const std::string& uri,
                          const std::string& cache_dir) {
  TERN_ASSIGN_OR_RETURN(const std::string folder, CacheFolder(uri));
  TERN_ASSIGN_OR_RETURN(const std::string manifest, ReadFileToString(local_dir + "/prepare.json"));
  const std::string root = (fs::path(cache_dir.empty() ? DefaultDataCache() : cache_dir) / folder).string();
  TERN_RETURN_IF_ERROR(MakeDirs(root));
  TERN_ASSIGN_OR_RETURN(FileLock lock, FileLock::Take(root + "/.lock"));
  const std::string target =
      root + "/" + fmt::format("{:016x}", XXH3_64bits(manifest.data(), manifest.size()));
  std::error_code ec;
  if (fs::exists(target, ec)) return Status::Ok();
  fs::rename(local_dir, target, ec);
  if (ec) return Status::IoError(fmt::format("cannot move {} to {}: {}", local_dir, target, ec.message()));
  return SyncParentDir(target);
}

Result<std::string> LocalDataDir(const std::string& dir, const DataMirrorOptions& options) {
  if (!IsRemoteData(dir)) return dir;
  TERN_ASSIGN_OR_RETURN(DataMirror m, MirrorPreparedData(dir, options));
  return m.local_dir;
}

Result<RemoteDataInfo> ReadRemoteDataInfo(const std::string& uri, const ckpt::S3Options& s3) {
  TERN_ASSIGN_OR_RETURN(std::unique_ptr<ckpt::Storage> store, ckpt::OpenStorage(uri, s3));
  auto text = store->Get("prepare.json");
  if (!text.ok()) return text.status().WithContext(fmt::format("reading {}/prepare.json", uri));
  TERN_ASSIGN_OR_RETURN(const PreparedManifest m, ParsePreparedManifest(*text, uri + "/prepare.json"));
  return RemoteDataInfo{m.vocab_size, m.shard_bytes};
}

Result<DataPublish> PublishPreparedData(const std::string& local_dir, const std::string& uri, bool force,
                                        const ckpt::S3Options& s3, FILE* progress, int parallel) {
  const auto t0 = std::chrono::steady_clock::now();
  TERN_ASSIGN_OR_RETURN(const std::string manifest, ReadFileToString(local_dir + "/prepare.json"));
  TERN_ASSIGN_OR_RETURN(std::unique_ptr<ckpt::Storage> store, ckpt::OpenStorage(uri, s3));
  TERN_ASSIGN_OR_RETURN(std::vector<ckpt::ObjectInfo> before, store->List(""));
  auto old = store->Get("prepare.json");
  DataPublish out;
  if (old.ok() && *old == manifest) {  // the same dataset: already there
    out.seconds = ElapsedS(t0);
    return out;
  }
  if (old.ok() && !force)
    return Status::InvalidArgument(
        fmt::format("{} already holds another prepared dataset (its prepare.json differs); pass --force to "
                    "replace it, or "
                    "choose another prefix. Runs reading it keep their verified local copies",
                    uri));
  if (!old.ok() && old.status().code() != Status::Code::kNotFound) return old.status();
  std::vector<std::string> names;
  uint64_t total = 0;
  for (const auto& e : fs::directory_iterator(local_dir)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || !IsDatasetFile(name) || name == "prepare.json") continue;
    names.push_back(name);
    total += e.file_size();
  }
  std::sort(names.begin(), names.end());
  // A replaced dataset's prepare.json goes first: from here until the new one is put, the prefix is an
  // unfinished upload, never an old manifest over new shards.
  if (old.ok()) TERN_RETURN_IF_ERROR(store->Delete("prepare.json"));
  std::unique_ptr<ProgressBar> bar;
  if (progress) bar = std::make_unique<ProgressBar>("upload", total + manifest.size(), "B", progress);
  std::vector<uint64_t> sizes(names.size());
  auto upload = [&](size_t i) -> Status {
    TERN_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(local_dir + "/" + names[i]));
    sizes[i] = bytes.size();
    return store->Put(names[i], bytes).WithContext(fmt::format("uploading {}", names[i]));
  };
  TERN_RETURN_IF_ERROR(RunParallel(names.size(), parallel, upload, [&](size_t i) {
    out.bytes += sizes[i];
    ++out.files;
    if (bar) bar->Update(out.bytes);
  }));
  TERN_RETURN_IF_ERROR(store->Put("prepare.json", manifest).WithContext("uploading prepare.json"));
  out.bytes += manifest.size();
  ++out.files;
  if (bar) bar->Finish();
  const std::set<std::string> kept(names.begin(), names.end());
  for (const ckpt::ObjectInfo& x : before) {
    // A shard or mask the new dataset does not have (other objects under the prefix are not ours to delete).
    if (!IsDatasetFile(x.key) || !x.key.ends_with(".bin") || kept.count(x.key)) continue;
    TERN_RETURN_IF_ERROR(store->Delete(x.key));
    ++out.removed;
  }
  out.seconds = ElapsedS(t0);
  return out;
}

}  // namespace tern

#include "run/attempt_metrics.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>

#include "metrics/run_record.h"

namespace tern::run {

MetricsTail::MetricsTail(std::string path, uint64_t offset, int job_last_step)
    : path_(std::move(path)), offset_(offset), size_seen_(offset), job_last_step_(job_last_step) {}

bool MetricsTail::Poll(double now) {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) return false;
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  bool grew = size != size_seen_;
  if (size < offset_) {  // a fresh start (no checkpoint to resume) rewrites the file from the top
    offset_ = 0;
    partial_.clear();
  }
  size_seen_ = size;
  if (size == offset_) return grew;
  std::FILE* f = std::fopen(path_.c_str(), "rb");
  if (!f) return grew;
  std::fseek(f, static_cast<long>(offset_), SEEK_SET);
  std::string chunk(size - offset_, '\0');
  const size_t n = std::fread(chunk.data(), 1, chunk.size(), f);
  std::fclose(f);
  chunk.resize(n);
  offset_ += n;
  partial_ += chunk;
  size_t start = 0;
  for (size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1)
    Row(partial_.substr(start, nl - start), now);
  partial_.erase(0, start);
  return true;
}

void MetricsTail::Row(const std::string& line, double now) {
  // The typed reader (metrics/run_record.h): a torn line, or a row this tern cannot read, is skipped.
  const Result<RunRow> row = ParseRunLine(line, path_);
  if (!row.ok()) return;
  if (const auto* e = std::get_if<EventRecord>(&row->record)) {
    if (e->event == "resume") {
      p_.resumed_from = e->step;
    } else if (e->event == "checkpoint") {
      p_.checkpoint_s += (e->Number("stall_ms") + e->Number("wait_ms")) / 1e3;
    } else if (e->event == "preempted") {
      p_.preempted = true;
      p_.checkpoint_s += e->Number("save_s");
    }
    return;
  }
  const auto* r = std::get_if<StepRecord>(&row->record);
  if (!r) return;  // start, eval and end rows
  const int step = r->step;
  const uint64_t tokens = r->tokens;
  const double step_s = r->step_ms / 1e3;
  if (p_.first_step < 0) {
    p_.first_step = step;
    // Tokens are cumulative over the job: what came before this attempt's first step.
    tokens_before_first_ = step > 0 ? tokens - tokens / static_cast<uint64_t>(step) : 0;
  }
  if (now > 0 && r->elapsed_s) {
    const double start = now - *r->elapsed_s;
    p_.run_start = p_.run_start > 0 ? std::min(p_.run_start, start) : start;
  }
  p_.last_step = std::max(p_.last_step, step);
  p_.tokens = tokens - std::min(tokens, tokens_before_first_);
  if (step <= job_last_step_) {
    p_.lost_steps++;
    p_.lost_s += step_s;
  } else {
    p_.productive_s += step_s;
  }
}

}  // namespace tern::run

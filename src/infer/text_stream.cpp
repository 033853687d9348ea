#include "infer/text_stream.h"

#include <algorithm>

namespace tern {
namespace {

constexpr size_t kContextTokens = 5;              // prompt tokens decoded with the first generated ones
const std::string kReplacement = "\xEF\xBF\xBD";  // U+FFFD, what an incomplete byte sequence decodes to

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

TextStream::TextStream(const Tokenizer* tok, const std::vector<int32_t>& prompt,
                       std::vector<std::string> stop)
    : tok_(tok), stop_(std::move(stop)) {
  stop_.erase(std::remove(stop_.begin(), stop_.end(), std::string()), stop_.end());
  const size_t start = prompt.size() > kContextTokens ? prompt.size() - kContextTokens : 0;
  ids_.assign(prompt.begin() + start, prompt.end());
  read_offset_ = ids_.size();
}

std::string TextStream::Detokenize(bool final) {
  if (read_offset_ == ids_.size()) return "";
  const std::string before = tok_->Decode(ids_.data() + prefix_offset_, read_offset_ - prefix_offset_);
  const std::string now = tok_->Decode(ids_.data() + prefix_offset_, ids_.size() - prefix_offset_);
  if (!final && (now.size() <= before.size() || EndsWith(now, kReplacement))) return "";
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  // The decodes agree on the common tokens (the tokenizer has no dummy prefix), so the new text is the tail.
  return now.size() > before.size() ? now.substr(before.size()) : "";
}

std::string TextStream::Release(std::string text, bool final, bool* stopped) {
  held_ += text;
  size_t cut = std::string::npos;
  for (const auto& s : stop_) cut = std::min(cut, held_.find(s));
  if (cut != std::string::npos) {
    stopped_ = *stopped = true;
    std::string out = held_.substr(0, cut);
    held_.clear();
    return out;
  }
  size_t keep = 0;  // the longest tail of held_ that is a proper prefix of a stop string
  if (!final) {
    for (const auto& s : stop_)
      for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; k--)
        if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
          keep = k;
          break;
        }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string TextStream::Add(int32_t token, bool* stopped) {
  *stopped = false;
  if (stopped_) return "";
  ids_.push_back(token);
  return Release(Detokenize(false), false, stopped);
}

std::string TextStream::Flush() {
  if (stopped_) return "";
  bool stopped = false;
  return Release(Detokenize(true), true, &stopped);
}

}  // namespace tern

#include "serve/served_adapters.h"

#include <algorithm>

namespace tern {

bool ServedAdapters::Put(const Entry& e, size_t limit, std::optional<Entry>* replaced) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& x) { return x.name == e.name; });
  if (it != entries_.end()) {
    if (replaced) *replaced = *it;
    *it = e;
    return true;
  }
  if (limit > 0 && entries_.size() >= limit) return false;
  entries_.push_back(e);
  return true;
}

std::optional<ServedAdapters::Entry> ServedAdapters::Find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Entry& e : entries_)
    if (e.name == name) return e;
  return std::nullopt;
}

std::optional<ServedAdapters::Entry> ServedAdapters::Remove(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& x) { return x.name == name; });
  if (it == entries_.end()) return std::nullopt;
  Entry e = *it;
  entries_.erase(it);
  return e;
}

std::vector<ServedAdapters::Entry> ServedAdapters::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_;
}

std::vector<std::string> ServedAdapters::Names() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> names;
  for (const Entry& e : entries_) names.push_back(e.name);
  return names;
}

}  // namespace tern

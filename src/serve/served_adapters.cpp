#include "serve/served_adapters.h"

#include <algorithm>

namespace tern {

bool ServedAdapters::Put(const Entry& e, size_t limit, std::optional<Entry>* replaced) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& x) { return x.name == e.name; });
  if (it != entries_.end()) {
    if (replaced) *replaced = *it;
    *it = e;
    it->last_used = ++clock_;
    return true;
  }
  if (limit > 0 && entries_.size() >= limit) return false;
  entries_.push_back(e);
  entries_.back().last_used = ++clock_;
  return true;
}

std::optional<ServedAdapters::Entry> ServedAdapters::Touch(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Entry& e : entries_)
    if (e.name == name) {
      e.last_used = ++clock_;
      return e;
    }
  return std::nullopt;
}

bool ServedAdapters::SetId(const std::string& name, int expected, int id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Entry& e : entries_)
    if (e.name == name && e.id == expected) {
      e.id = id;
      return true;
    }
  return false;
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
